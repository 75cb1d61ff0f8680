/// <reference lib="dom" />
// Replay: an episode file written by `rollgym rollout --out`, uploaded from this computer or
// picked from the directory the server shares; its groups with their verdicts, and any
// episode stepped through turn by turn. The URL names the file, episode and turn.

import type { EpisodeFile } from "../../../record/episode-reader.ts";
import type { SharedFile } from "../files.ts";
import { api, append, envs, h, markup, num, route, setParams, type TagInfo } from "./api.ts";
import { episodeView, exportButtons, groupCard, groupGrid, rewardChart } from "./episodes.ts";
import { groupViews, parseEpisodeText } from "./records.ts";

export function mount(root: HTMLElement, params: URLSearchParams): () => void {
  let tags = new Map<string, TagInfo>();
  let file: EpisodeFile | null = null;
  let current: { element: HTMLElement; destroy: () => void } | null = null;

  const status = h("p", { class: "muted", role: "status" });
  const sharedList = h("ul", { class: "shared" });
  const body = h("div", { class: "replay-body" });
  const panel = h("div", { class: "episode-panel" });
  const upload = h("input", {
    id: "replay-file",
    type: "file",
    accept: ".jsonl,application/x-ndjson",
    onchange: () => void send(upload.files?.[0]),
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
      sharedList,
      status,
      h("div", { class: "columns" }, body, panel),
    ),
  );

  const fail = (error: unknown) => {
    status.textContent = error instanceof Error ? error.message : String(error);
  };

  async function send(chosen: File | undefined): Promise<void> {
    if (!chosen) return;
    status.textContent = `Uploading ${chosen.name}…`;
    try {
      const text = await chosen.text();
      const stored = await api<{ id: string }>("/v1/episode-files", {
        method: "POST",
        headers: { "content-type": "application/x-ndjson" },
        body: text,
      });
      setParams({ file: `upload:${stored.id}`, env: null, turn: null });
      show(text, chosen.name);
    } catch (error) {
      fail(error);
    }
  }

  async function load(ref: string): Promise<void> {
    const [kind, name] = [ref.slice(0, ref.indexOf(":")), ref.slice(ref.indexOf(":") + 1)];
    const path =
      kind === "shared" ? `shared/${encodeURIComponent(name)}` : `uploads/${encodeURIComponent(name)}`;
    status.textContent = "Loading…";
    try {
      show(await api<string>(`/v1/episode-files/${path}`), kind === "shared" ? name : "upload");
    } catch (error) {
      fail(error);
    }
  }

  function show(text: string, name: string): void {
    file = parseEpisodeText(text);
    const f = file;
    const groups = groupViews(f);
    const metrics = Object.entries(f.summary?.metrics ?? {});
    const about = `${f.header.mode} · ${f.header.tags.map((t) => `${t.tag}×${t.groups}`).join(", ")} · group size ${f.header.group_size} · seed ${f.header.seed} · policy ${f.header.policy}`;
    const partial = groups.filter((g) => g.verdict === "partial").length;
    status.textContent =
      `${name}: ${f.episodes.length} episodes in ${groups.length} groups` +
      (partial
        ? ` (${partial} partial: the rollout was interrupted${f.summary.interrupted ? ` by ${f.summary.interrupted}` : ""} before they finished).`
        : ".");
    const draw = () => {
      const selected = Number(route().params.get("env") ?? f.episodes[0]?.env_id ?? 0);
      body.replaceChildren();
      append(body, [
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
              () => ({ title: name, about, groups, metrics: f.summary?.metrics ?? {} }),
              tags,
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
        groupGrid(
          groups.map((g) =>
            groupCard(
              g,
              (env) => {
                setParams({ env, turn: null });
                draw();
                // The redrawn chip keeps the focus, so the keyboard stays where it was.
                body.querySelector<HTMLElement>(`button.ep[aria-pressed="true"]`)?.focus();
              },
              selected,
            ),
          ),
        ),
      ]);
      current?.destroy();
      const episode = f.episodes.find((e) => e.env_id === selected);
      panel.replaceChildren();
      if (!episode) return;
      current = episodeView(episode, tags.get(episode.tag), {
        turn: Number(route().params.get("turn") ?? 0),
        onTurn: (turn) => setParams({ env: episode.env_id, turn }),
      });
      panel.append(current.element);
    };
    draw();
  }

  void (async () => {
    try {
      tags = await envs();
      const listing = await api<{ shared: boolean; files: SharedFile[] }>("/v1/episode-files");
      if (listing.shared) {
        sharedList.replaceChildren(
          h(
            "li",
            { class: "muted" },
            listing.files.length ? "Shared by the server:" : "The shared directory has no episode files.",
          ),
          ...listing.files.map((f) =>
            h(
              "li",
              {},
              h(
                "button",
                {
                  type: "button",
                  onclick: () => {
                    setParams({ file: `shared:${f.name}`, env: null, turn: null });
                    void load(`shared:${f.name}`);
                  },
                },
                f.name,
              ),
              ` ${num(f.bytes / 1024)} kB · ${f.modified.slice(0, 16).replace("T", " ")}`,
            ),
          ),
        );
      }
      const ref = params.get("file");
      if (ref) await load(ref);
    } catch (error) {
      fail(error);
    }
  })();

  return () => current?.destroy();
}
