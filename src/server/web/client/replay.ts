/// <reference lib="dom" />
// Replay: an episode file written by `rollgym rollout --out`, uploaded from this computer or
// picked from the directory the server shares; its groups with their verdicts, and any
// episode stepped through turn by turn. The URL names the file, episode and turn.

import type { EpisodeFile } from "../../../record/episode-reader.ts";
import type { SharedFile } from "../files.ts";
import { api, append, bringIntoView, envs, h, markup, num, route, setParams, type TagInfo } from "./api.ts";
import { episodeView, exportButtons, type GroupView, groupCard, groupGrid, rewardChart } from "./episodes.ts";
import { groupViews, parseEpisodeText } from "./records.ts";

/** One mounted Replay view: its elements, the tags' styles and the episode it shows. */
interface ReplayView {
  status: HTMLElement;
  sharedList: HTMLElement;
  body: HTMLElement;
  panel: HTMLElement;
  tags: Map<string, TagInfo>;
  current: { element: HTMLElement; destroy: () => void } | null;
}

/** An episode file as shown: its name, its groups and the line that describes it. */
interface ShownFile {
  name: string;
  file: EpisodeFile;
  groups: GroupView[];
  about: string;
}

export function mount(root: HTMLElement, params: URLSearchParams): () => void {
  const view: ReplayView = {
    status: h("p", { class: "muted", role: "status" }),
    sharedList: h("ul", { class: "shared" }),
    body: h("div", { class: "replay-body" }),
    panel: h("div", { class: "episode-panel" }),
    tags: new Map(),
    current: null,
  };
  const upload = h("input", {
    id: "replay-file",
    type: "file",
    accept: ".jsonl,application/x-ndjson",
    onchange: () => void send(view, upload.files?.[0]),
  });
  root.append(
    h(
      "section",
      { class: "replay" },
      h(
        "div",
        { class: "controls" },
        h("label", {}, "Open an episode file ", upload),
        h("span", { class: "muted" }, "(written by rollgym rollout --out)"),
      ),
      view.sharedList,
      view.status,
      h("div", { class: "columns" }, view.body, view.panel),
    ),
  );
  void open(view, params.get("file"));
  return () => view.current?.destroy();
}

function fail(view: ReplayView, error: unknown): void {
  view.status.textContent = error instanceof Error ? error.message : String(error);
}

/** The tags, the server's shared files, then the file the URL names. */
async function open(view: ReplayView, ref: string | null): Promise<void> {
  try {
    view.tags = await envs();
    const listing = await api<{ shared: boolean; files: SharedFile[] }>("/v1/episode-files");
    if (listing.shared) listShared(view, listing.files);
    if (ref) await load(view, ref);
  } catch (error) {
    fail(view, error);
  }
}

function listShared(view: ReplayView, files: readonly SharedFile[]): void {
  view.sharedList.replaceChildren(
    h(
      "li",
      { class: "muted" },
      files.length ? "Shared by the server:" : "The shared directory has no episode files.",
    ),
    ...files.map((f) =>
      h(
        "li",
        {},
        h(
          "button",
          {
            type: "button",
            onclick: () => {
              setParams({ file: `shared:${f.name}`, env: null, turn: null });
              void load(view, `shared:${f.name}`);
            },
          },
          f.name,
        ),
        ` ${num(f.bytes / 1024)} kB · ${f.modified.slice(0, 16).replace("T", " ")}`,
      ),
    ),
  );
}

/** Uploads a file from this computer, so its URL can be shared, and shows it. */
async function send(view: ReplayView, chosen: File | undefined): Promise<void> {
  if (!chosen) return;
  view.status.textContent = `Uploading ${chosen.name}…`;
  try {
    const text = await chosen.text();
    const stored = await api<{ id: string }>("/v1/episode-files", {
      method: "POST",
      headers: { "content-type": "application/x-ndjson" },
      body: text,
    });
    setParams({ file: `upload:${stored.id}`, env: null, turn: null });
    show(view, text, chosen.name);
  } catch (error) {
    fail(view, error);
  }
}

/** Shows a file by its URL reference: `shared:<name>` or `upload:<id>`. */
async function load(view: ReplayView, ref: string): Promise<void> {
  const [kind, name] = [ref.slice(0, ref.indexOf(":")), ref.slice(ref.indexOf(":") + 1)];
  const path =
    kind === "shared" ? `shared/${encodeURIComponent(name)}` : `uploads/${encodeURIComponent(name)}`;
  view.status.textContent = "Loading…";
  try {
    show(view, await api<string>(`/v1/episode-files/${path}`), kind === "shared" ? name : "upload");
  } catch (error) {
    fail(view, error);
  }
}

function show(view: ReplayView, text: string, name: string): void {
  const file = parseEpisodeText(text);
  const { header, summary } = file;
  const groups = groupViews(file);
  const about = `${header.mode} · ${header.tags.map((t) => `${t.tag}×${t.groups}`).join(", ")} · group size ${header.group_size} · seed ${header.seed} · policy ${header.policy}`;
  const partial = groups.filter((g) => g.verdict === "partial").length;
  view.status.textContent =
    `${name}: ${file.episodes.length} episodes in ${groups.length} groups` +
    (partial
      ? ` (${partial} partial: the rollout was interrupted${summary.interrupted ? ` by ${summary.interrupted}` : ""} before they finished).`
      : ".");
  drawFile(view, { name, file, groups, about });
}

/** The file's header, metrics, chart and group cards, and the episode the URL selects. */
function drawFile(view: ReplayView, shown: ShownFile): void {
  const { name, file, groups, about } = shown;
  const metrics = Object.entries(file.summary?.metrics ?? {});
  const selected = Number(route().params.get("env") ?? file.episodes[0]?.env_id ?? 0);
  const select = (env: number) => {
    setParams({ env, turn: null });
    drawFile(view, shown);
    // The redrawn chip keeps the focus, so the keyboard stays where it was.
    view.body.querySelector<HTMLElement>(`button.ep[aria-pressed="true"]`)?.focus();
    bringIntoView(view.panel);
  };
  view.body.replaceChildren();
  append(view.body, [
    h(
      "header",
      {},
      h(
        "h2",
        {},
        name,
        " ",
        exportButtons(
          name.replace(/\.jsonl$/, ""),
          () => ({ title: name, about, groups, metrics: file.summary?.metrics ?? {} }),
          view.tags,
        ),
      ),
      h("p", {}, about),
    ),
    metrics.length
      ? h(
          "details",
          {},
          h("summary", {}, `Metrics (${metrics.length})`),
          h(
            "dl",
            { class: "metrics" },
            metrics.map(([k, v]) => [h("dt", {}, k), h("dd", {}, num(v))]),
          ),
        )
      : null,
    markup(rewardChart(groups)),
    groupGrid(groups.map((g) => groupCard(g, select, selected))),
  ]);
  drawEpisode(view, file, selected);
}

function drawEpisode(view: ReplayView, file: EpisodeFile, selected: number): void {
  view.current?.destroy();
  const episode = file.episodes.find((e) => e.env_id === selected);
  view.panel.replaceChildren();
  if (!episode) return;
  view.current = episodeView(episode, view.tags.get(episode.tag), {
    turn: Number(route().params.get("turn") ?? 0),
    onTurn: (turn) => setParams({ env: episode.env_id, turn }),
  });
  view.panel.append(view.current.element);
}
