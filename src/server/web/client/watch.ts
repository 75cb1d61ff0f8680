/// <reference lib="dom" />
// Watch: a watch subscription (PROTOCOL.md "Watch") shows every rollout the server runs, group
// by group as they finish, with each group's reward spread and the filter's verdict; a small
// rollout can be started from here with the server's own policy. Episodes open to their
// turn-by-turn timeline.
import type { EpisodeRecord } from "../../../record/episode-record.ts";
import { envs, h, markup, route, setParams, type TagInfo } from "./api.ts";
import {
  episodeView,
  exportButtons,
  type GroupView,
  groupCard,
  groupGrid,
  rewardChart,
  successChart,
  type Verdict,
} from "./episodes.ts";
import { Connection, type Frame } from "./protocol.ts";

interface RolloutView {
  stream: number;
  rollout: string;
  mode: string;
  tags: { tag: string; groups: number }[];
  groupSize: number;
  seed: number;
  groups: Map<number, GroupView>;
  done: boolean;
  error: string | null;
  lost: number;
  mine: boolean;
  metrics: Record<string, number>;
}

const describe = (r: RolloutView) =>
  `${r.mode} · ${r.tags.map((t) => `${t.tag}×${t.groups}`).join(", ")} · group size ${r.groupSize} · seed ${r.seed}`;

/** Group cards shown per rollout, and groups whose turns are kept (a trainer's batch can be huge). */
const SHOWN_GROUPS = 64;
const KEPT_TURNS = 256;

/** Past KEPT_TURNS groups, the oldest keep only what the cards and charts need. */
function forgetTurns(r: RolloutView): void {
  if (r.groups.size <= KEPT_TURNS) return;
  const oldest = [...r.groups.values()].sort((a, b) => a.group - b.group)[r.groups.size - KEPT_TURNS - 1];
  oldest.episodes = oldest.episodes.map((e) => ({ ...e, turns: [], final_state: "" }));
}

/** Rollouts kept on the page; older finished ones are forgotten. */
const MAX_ROLLOUTS = 20;

export function mount(root: HTMLElement, params: URLSearchParams): () => void {
  const rollouts = new Map<number, RolloutView>();
  const mine = new Set<string>();
  let tags = new Map<string, TagInfo>();
  let connection: Connection | null = null;
  let closed = false;
  let selected: { stream: number; env: number } | null = params.has("stream")
    ? { stream: Number(params.get("stream")), env: Number(params.get("env") ?? -1) }
    : null;
  let episodePanel: { destroy: () => void } | null = null;
  let pending = false;

  const note = h("p", { class: "muted", role: "status" }, "Connecting…");
  const list = h("div", { class: "rollouts" });
  const charts = h("div", { class: "charts" });
  const panel = h("div", { class: "episode-panel" });
  const tagSelect = h("select", { id: "watch-tag" });
  const groupsInput = h("input", { id: "watch-groups", type: "number", min: 1, max: 64, value: "4" });
  const sizeInput = h("input", { id: "watch-size", type: "number", min: 1, max: 32, value: "4" });
  const modeSelect = h(
    "select",
    { id: "watch-mode" },
    h("option", { value: "train" }, "train"),
    h("option", { value: "val" }, "val"),
  );
  const startButton = h("button", { type: "submit", disabled: true }, "Start rollout");

  root.append(
    h(
      "section",
      { class: "watch" },
      h(
        "form",
        {
          class: "controls",
          onsubmit: (event: Event) => {
            event.preventDefault();
            start();
          },
        },
        h("label", {}, "Tag ", tagSelect),
        h("label", {}, "Groups ", groupsInput),
        h("label", {}, "Group size ", sizeInput),
        h("label", {}, "Mode ", modeSelect),
        startButton,
        h("span", { class: "muted" }, "Plays with the server's own policy or endpoint."),
      ),
      note,
      charts,
      h("div", { class: "columns" }, list, panel),
    ),
  );

  const schedule = () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      draw();
    });
  };

  const view = (stream: number): RolloutView | undefined => rollouts.get(stream);

  const add = (r: Frame) => {
    const stream = r.stream as number;
    rollouts.set(stream, {
      stream,
      rollout: r.rollout as string,
      mode: r.mode as string,
      tags: r.tags as { tag: string; groups: number }[],
      groupSize: r.group_size as number,
      seed: r.seed as number,
      groups: rollouts.get(stream)?.groups ?? new Map(),
      done: false,
      error: null,
      lost: 0,
      mine: mine.has(r.rollout as string),
      metrics: {},
    });
    while (rollouts.size > MAX_ROLLOUTS) {
      const oldest = [...rollouts.values()].find((x) => x.done) ?? [...rollouts.values()][0];
      rollouts.delete(oldest.stream);
    }
  };

  const onFrame = (frame: Frame) => {
    switch (frame.type) {
      case "watching":
        for (const r of frame.rollouts as Frame[]) add(r);
        note.textContent = "Watching the server's rollouts. Groups appear as they finish.";
        break;
      case "watch_rollout":
        add(frame);
        break;
      case "watch_group": {
        const r = view(frame.stream as number);
        if (!r) break;
        r.groups.set(frame.group as number, {
          group: frame.group as number,
          tag: frame.tag as string,
          seed: frame.seed as number,
          episodes: frame.episodes as EpisodeRecord[],
          verdict: "pending",
          score: null,
        });
        forgetTurns(r);
        break;
      }
      case "watch_batch": {
        const r = view(frame.stream as number);
        if (!r) break;
        r.done = true;
        r.error = (frame.error as string | undefined) ?? null;
        r.metrics = frame.metrics as Record<string, number>;
        const verdicts: [number[], Verdict][] = [
          [frame.kept as number[], "kept"],
          [frame.dropped as number[], "dropped"],
          [frame.failed_groups as number[], "failed"],
        ];
        const scores = frame.group_scores as (number | null)[];
        for (const [ids, verdict] of verdicts) {
          for (const id of ids) {
            const g = r.groups.get(id);
            if (g) Object.assign(g, { verdict, score: scores[id] ?? null });
          }
        }
        break;
      }
      case "watch_gap":
        for (const stream of frame.streams as number[]) {
          const r = view(stream);
          if (r) r.lost += frame.dropped as number;
        }
        break;
      // Our own rollout's frames: acknowledged so the server can let go of them.
      case "group":
        connection?.send({ type: "ack", rollout: frame.rollout as string, groups: [frame.group as number] });
        return;
      case "batch":
        connection?.send({ type: "ack", rollout: frame.rollout as string, groups: [], batch: true });
        return;
      case "error":
        note.textContent = `Server: ${frame.message as string}`;
        startButton.disabled = false;
        return;
      default:
        return;
    }
    schedule();
  };

  function start(): void {
    if (!connection) return;
    const groups = Math.max(1, Number(groupsInput.value) || 1);
    const id = `web-${Math.random().toString(36).slice(2, 10)}`;
    mine.add(id);
    connection.send({ type: "credit", groups });
    connection.send({
      type: "rollout",
      id,
      tags: [{ tag: tagSelect.value, groups }],
      mode: modeSelect.value,
      group_size: Math.max(1, Number(sizeInput.value) || 1),
      delivery: "batch",
    });
    note.textContent = `Started rollout ${id}.`;
  }

  const open = (stream: number, env: number) => {
    selected = { stream, env };
    setParams({ stream, env, turn: null });
    drawPanel();
    schedule();
  };

  function drawPanel(): void {
    episodePanel?.destroy();
    episodePanel = null;
    panel.replaceChildren();
    if (!selected) return;
    const r = view(selected.stream);
    const episode =
      r && [...r.groups.values()].flatMap((g) => g.episodes).find((e) => e.env_id === selected!.env);
    if (!episode) return;
    const shown = episodeView(episode, tags.get(episode.tag), {
      turn: Number(route().params.get("turn") ?? 0),
      onTurn: (turn) => setParams({ turn }),
    });
    episodePanel = shown;
    panel.append(shown.element);
  }

  function draw(): void {
    const ordered = [...rollouts.values()].sort((a, b) => b.stream - a.stream);
    const finished = ordered.filter((r) => r.done && !r.error).reverse();
    charts.replaceChildren(
      markup(
        successChart(
          finished.map((r) => {
            const episodes = [...r.groups.values()].flatMap((g) => g.episodes);
            return {
              label: r.rollout,
              value: episodes.filter((e) => e.success).length / Math.max(episodes.length, 1),
            };
          }),
        ),
      ),
    );
    list.replaceChildren(
      ...(ordered.length
        ? []
        : [h("p", { class: "muted" }, "No rollouts yet: start one above, or wait for a trainer's.")]),
      ...ordered.map((r) => {
        const total = r.tags.reduce((n, t) => n + t.groups, 0);
        const groups = [...r.groups.values()].sort((a, b) => a.group - b.group);
        return h(
          "section",
          {
            class: `rollout${r.mine ? " mine" : ""}`,
            "data-rollout": r.rollout,
            "aria-label": `Rollout ${r.rollout}`,
          },
          h(
            "header",
            {},
            h(
              "h2",
              {},
              `${r.rollout}${r.mine ? " (yours)" : ""} `,
              r.done && !r.error
                ? exportButtons(
                    r.rollout,
                    () => ({ title: r.rollout, about: describe(r), groups, metrics: r.metrics }),
                    tags,
                  )
                : null,
            ),
            h(
              "p",
              {},
              `${describe(r)} · `,
              h("span", { "data-testid": "progress" }, `${r.groups.size}/${total} groups`),
              r.done
                ? r.error
                  ? h("span", { class: "bad" }, ` · failed: ${r.error}`)
                  : " · done"
                : " · running",
              r.lost
                ? h("span", { class: "bad" }, ` · ${r.lost} watch frame(s) lost (the watcher fell behind)`)
                : "",
            ),
          ),
          markup(rewardChart(groups)),
          groupGrid(
            groups
              .slice(-SHOWN_GROUPS)
              .map((g) =>
                groupCard(
                  g,
                  (env) => open(r.stream, env),
                  selected?.stream === r.stream ? selected.env : null,
                ),
              ),
          ),
          groups.length > SHOWN_GROUPS
            ? h("p", { class: "muted" }, `Showing the last ${SHOWN_GROUPS} of ${groups.length} groups.`)
            : null,
        );
      }),
    );
    if (selected && !panel.firstChild) drawPanel();
  }

  void envs().then((catalogue) => {
    tags = catalogue;
    tagSelect.append(...[...tags.keys()].map((tag) => h("option", { value: tag }, tag)));
    tagSelect.value = tags.has("SimpleSokoban") ? "SimpleSokoban" : ([...tags.keys()][0] ?? "");
  });

  Connection.open()
    .then((c) => {
      if (closed) return c.close();
      connection = c;
      c.onFrame = onFrame;
      c.onClose = (code, reason) => {
        if (!closed)
          note.textContent = `Disconnected (${code}${reason ? `: ${reason}` : ""}). Reload to watch again.`;
        startButton.disabled = true;
      };
      c.send({ type: "watch" });
      startButton.disabled = false;
    })
    .catch((error: Error) => {
      note.textContent = error.message;
    });

  return () => {
    closed = true;
    episodePanel?.destroy();
    connection?.close();
  };
}
