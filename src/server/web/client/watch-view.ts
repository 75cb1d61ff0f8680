/// <reference lib="dom" />
// Watch: a watch subscription (PROTOCOL.md "Watch") shows every rollout the server runs, group
// by group as they finish, with each group's reward spread and the filter's verdict; a small
// rollout can be started from here with the server's own policy. An endless stream shows its
// last windows instead (windows.ts). Episodes open to their turn-by-turn timeline, brought into
// view on a phone.
import type { EpisodeRecord } from "../../../record/episode-record.ts";
import { bringIntoView, envs, h, markup, route, setParams, type TagInfo } from "./api.ts";
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
import {
  addEndlessGroup,
  type EndlessView,
  endlessProgress,
  endlessView,
  judgeWindow,
  windowList,
} from "./windows.ts";

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
  /** An endless stream's windows; null for a rollout that ends. */
  endless: EndlessView | null;
}

const describe = (r: RolloutView) =>
  `${r.mode}${r.endless ? " · endless, per window" : ""} · ${r.tags.map((t) => `${t.tag}×${t.groups}`).join(", ")} · group size ${r.groupSize} · seed ${r.seed}`;

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

/** One mounted Watch view: its elements, the rollouts it shows and its connection. */
interface WatchView {
  el: {
    note: HTMLElement;
    list: HTMLElement;
    charts: HTMLElement;
    panel: HTMLElement;
    tagSelect: HTMLSelectElement;
    groupsInput: HTMLInputElement;
    sizeInput: HTMLInputElement;
    modeSelect: HTMLSelectElement;
    startButton: HTMLButtonElement;
  };
  rollouts: Map<number, RolloutView>;
  /** Ids of the rollouts this page started. */
  mine: Set<string>;
  tags: Map<string, TagInfo>;
  connection: Connection | null;
  closed: boolean;
  selected: { stream: number; env: number } | null;
  episodePanel: { destroy: () => void } | null;
  /** A redraw is asked for the next animation frame. */
  pending: boolean;
}

export function mount(root: HTMLElement, params: URLSearchParams): () => void {
  const view: WatchView = {
    el: watchElements(),
    rollouts: new Map(),
    mine: new Set(),
    tags: new Map(),
    connection: null,
    closed: false,
    selected: params.has("stream")
      ? { stream: Number(params.get("stream")), env: Number(params.get("env") ?? -1) }
      : null,
    episodePanel: null,
    pending: false,
  };
  root.append(layout(view));

  void envs().then((catalogue) => {
    const { tagSelect } = view.el;
    view.tags = catalogue;
    tagSelect.append(...[...catalogue.keys()].map((tag) => h("option", { value: tag }, tag)));
    tagSelect.value = catalogue.has("SimpleSokoban") ? "SimpleSokoban" : ([...catalogue.keys()][0] ?? "");
  });
  connect(view);

  return () => {
    view.closed = true;
    view.episodePanel?.destroy();
    view.connection?.close();
  };
}

function watchElements(): WatchView["el"] {
  return {
    note: h("p", { class: "muted", role: "status" }, "Connecting…"),
    list: h("div", { class: "rollouts" }),
    charts: h("div", { class: "charts" }),
    panel: h("div", { class: "episode-panel" }),
    tagSelect: h("select", { id: "watch-tag" }),
    groupsInput: h("input", { id: "watch-groups", type: "number", min: 1, max: 64, value: "4" }),
    sizeInput: h("input", { id: "watch-size", type: "number", min: 1, max: 32, value: "4" }),
    modeSelect: h(
      "select",
      { id: "watch-mode" },
      h("option", { value: "train" }, "train"),
      h("option", { value: "val" }, "val"),
    ),
    startButton: h("button", { type: "submit", disabled: true }, "Start rollout"),
  };
}

/** The view's section: the form that starts a rollout, the charts, the rollouts and the episode panel. */
function layout(view: WatchView): HTMLElement {
  const { el } = view;
  return h(
    "section",
    { class: "watch" },
    h(
      "form",
      {
        class: "controls",
        onsubmit: (event: Event) => {
          event.preventDefault();
          start(view);
        },
      },
      h("label", {}, "Tag ", el.tagSelect),
      h("label", {}, "Groups ", el.groupsInput),
      h("label", {}, "Group size ", el.sizeInput),
      h("label", {}, "Mode ", el.modeSelect),
      el.startButton,
      h("span", { class: "muted" }, "Plays with the server's own policy or endpoint."),
    ),
    el.note,
    el.charts,
    h("div", { class: "columns" }, el.list, el.panel),
  );
}

/** Opens the watch subscription; the start button works while it is open. */
function connect(view: WatchView): void {
  const { note, startButton } = view.el;
  Connection.open()
    .then((c) => {
      if (view.closed) return c.close();
      view.connection = c;
      c.onFrame = (frame) => onFrame(view, frame);
      c.onClose = (code, reason) => {
        if (!view.closed)
          note.textContent = `Disconnected (${code}${reason ? `: ${reason}` : ""}). Reload to watch again.`;
        startButton.disabled = true;
      };
      c.send({ type: "watch" });
      startButton.disabled = false;
    })
    .catch((error: Error) => {
      note.textContent = error.message;
    });
}

/** Starts a rollout of the form's tag with the server's own policy, with credit for all its groups. */
function start(view: WatchView): void {
  const { connection, el } = view;
  if (!connection) return;
  const groups = Math.max(1, Number(el.groupsInput.value) || 1);
  const id = `web-${Math.random().toString(36).slice(2, 10)}`;
  view.mine.add(id);
  connection.send({ type: "credit", groups });
  connection.send({
    type: "rollout",
    id,
    tags: [{ tag: el.tagSelect.value, groups }],
    mode: el.modeSelect.value,
    group_size: Math.max(1, Number(el.sizeInput.value) || 1),
    delivery: "batch",
  });
  el.note.textContent = `Started rollout ${id}.`;
}

/** Redraws on the next animation frame, once however many frames arrive before it. */
function schedule(view: WatchView): void {
  if (view.pending) return;
  view.pending = true;
  requestAnimationFrame(() => {
    view.pending = false;
    draw(view);
  });
}

function onFrame(view: WatchView, frame: Frame): void {
  const { connection, el } = view;
  switch (frame.type) {
    case "watching":
      for (const r of frame.rollouts as Frame[]) addRollout(view, r);
      el.note.textContent = "Watching the server's rollouts. Groups appear as they finish.";
      break;
    case "watch_rollout":
      addRollout(view, frame);
      break;
    case "watch_group":
      addGroup(view, frame);
      break;
    case "watch_batch":
      finishRollout(view, frame);
      break;
    case "watch_window": {
      const r = view.rollouts.get(frame.stream as number);
      if (r?.endless) judgeWindow(r.endless, r.groups, frame);
      break;
    }
    case "watch_gap":
      for (const stream of frame.streams as number[]) {
        const r = view.rollouts.get(stream);
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
      el.note.textContent = `Server: ${frame.message as string}`;
      el.startButton.disabled = false;
      return;
    default:
      return;
  }
  schedule(view);
}

/** A rollout the server announced (again, after a gap: its groups so far are kept). */
function addRollout(view: WatchView, r: Frame): void {
  const { rollouts } = view;
  const stream = r.stream as number;
  const tags = r.tags as { tag: string; groups: number }[];
  const before = rollouts.get(stream);
  rollouts.set(stream, {
    stream,
    rollout: r.rollout as string,
    mode: r.mode as string,
    tags,
    groupSize: r.group_size as number,
    seed: r.seed as number,
    groups: before?.groups ?? new Map(),
    done: false,
    error: null,
    lost: 0,
    mine: view.mine.has(r.rollout as string),
    metrics: {},
    endless:
      r.endless === true ? (before?.endless ?? endlessView(tags.reduce((n, t) => n + t.groups, 0))) : null,
  });
  while (rollouts.size > MAX_ROLLOUTS) {
    const oldest = [...rollouts.values()].find((x) => x.done) ?? [...rollouts.values()][0];
    rollouts.delete(oldest.stream);
  }
}

function addGroup(view: WatchView, frame: Frame): void {
  const r = view.rollouts.get(frame.stream as number);
  if (!r) return;
  const group: GroupView = {
    group: frame.group as number,
    tag: frame.tag as string,
    seed: frame.seed as number,
    episodes: frame.episodes as EpisodeRecord[],
    verdict: "pending",
    score: null,
  };
  if (r.endless) addEndlessGroup(r.endless, r.groups, group);
  else r.groups.set(group.group, group);
  forgetTurns(r);
}

/** A rollout's batch: its metrics, and each group's verdict and score. */
function finishRollout(view: WatchView, frame: Frame): void {
  const r = view.rollouts.get(frame.stream as number);
  if (!r) return;
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
}

function open(view: WatchView, stream: number, env: number): void {
  view.selected = { stream, env };
  setParams({ stream, env, turn: null });
  drawPanel(view);
  bringIntoView(view.el.panel);
  schedule(view);
}

/** The selected episode, turn by turn, beside the rollouts. */
function drawPanel(view: WatchView): void {
  const { selected } = view;
  view.episodePanel?.destroy();
  view.episodePanel = null;
  view.el.panel.replaceChildren();
  if (!selected) return;
  const r = view.rollouts.get(selected.stream);
  const episode =
    r && [...r.groups.values()].flatMap((g) => g.episodes).find((e) => e.env_id === selected.env);
  if (!episode) return;
  const shown = episodeView(episode, view.tags.get(episode.tag), {
    turn: Number(route().params.get("turn") ?? 0),
    onTurn: (turn) => setParams({ turn }),
  });
  view.episodePanel = shown;
  view.el.panel.append(shown.element);
}

function draw(view: WatchView): void {
  const { el } = view;
  const ordered = [...view.rollouts.values()].sort((a, b) => b.stream - a.stream);
  const finished = ordered.filter((r) => r.done && !r.error).reverse();
  el.charts.replaceChildren(
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
  el.list.replaceChildren(
    ...(ordered.length
      ? []
      : [h("p", { class: "muted" }, "No rollouts yet: start one above, or wait for a trainer's.")]),
    ...ordered.map((r) => rolloutSection(view, r)),
  );
  if (view.selected && !el.panel.firstChild) drawPanel(view);
}

/** One rollout: its header with progress and exports, its reward chart and its last group cards. */
function rolloutSection(view: WatchView, r: RolloutView): HTMLElement {
  const total = r.tags.reduce((n, t) => n + t.groups, 0);
  const groups = [...r.groups.values()].sort((a, b) => a.group - b.group);
  const { selected } = view;
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
              view.tags,
            )
          : null,
      ),
      h(
        "p",
        {},
        `${describe(r)} · `,
        h(
          "span",
          { "data-testid": "progress" },
          r.endless ? endlessProgress(r.endless) : `${r.groups.size}/${total} groups`,
        ),
        r.done ? (r.error ? h("span", { class: "bad" }, ` · failed: ${r.error}`) : " · done") : " · running",
        r.lost
          ? h("span", { class: "bad" }, ` · ${r.lost} watch frame(s) lost (the watcher fell behind)`)
          : "",
      ),
    ),
    // An endless stream's group ids grow without end: its windows stand in for the reward chart.
    r.endless ? windowList(r.endless) : markup(rewardChart(groups)),
    groupGrid(
      groups
        .slice(-SHOWN_GROUPS)
        .map((g) =>
          groupCard(
            g,
            (env) => open(view, r.stream, env),
            selected?.stream === r.stream ? selected.env : null,
          ),
        ),
    ),
    groups.length > SHOWN_GROUPS
      ? h("p", { class: "muted" }, `Showing the last ${SHOWN_GROUPS} of ${groups.length} groups.`)
      : null,
  );
}
