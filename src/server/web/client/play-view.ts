/// <reference lib="dom" />
// Play: a tag and a seed, the puzzle drawn and the text the model would read beside it; arrow
// keys, WASD or the buttons step it; undo, reset, and the shortest solution revealed and
// animated. Each move asks the server for the whole trajectory of the actions so far, so undo,
// reset and a shared URL (tag, seed, actions) all replay exactly.
import { MAX_SEED } from "../../../../protocol/seeds.ts";
import type { PlayResult } from "../play.ts";
import { api, append, envs, h, markup, num, route, setParams, type TagInfo, typing } from "./api.ts";
import { stateSvg } from "./picture.ts";

// Action ids of each direction, per env type (gym_sokoban's and gymnasium's orders).
const DIRECTIONS: Record<string, Record<string, number>> = {
  sokoban: { Up: 1, Down: 2, Left: 3, Right: 4 },
  frozen_lake: { Left: 1, Down: 2, Right: 3, Up: 4 },
};
const KEYS: Record<string, string> = {
  ArrowUp: "Up",
  ArrowDown: "Down",
  ArrowLeft: "Left",
  ArrowRight: "Right",
  w: "Up",
  s: "Down",
  a: "Left",
  d: "Right",
};
const ANIMATION_MS = 350;

interface Pull {
  seed: number;
  arm: string;
  reward: number;
}

/** The view's elements that change after mounting. */
interface PlayElements {
  tagSelect: HTMLSelectElement;
  seedInput: HTMLInputElement;
  board: HTMLElement;
  status: HTMLElement;
  pad: HTMLElement;
  actionButtons: HTMLElement;
  tools: HTMLElement;
  solutionBox: HTMLElement;
  stateText: HTMLElement;
  prompt: HTMLElement;
  history: HTMLElement;
  /** What the URL asked for and could not be shown (an unknown tag, a bad seed). */
  notice: HTMLElement;
}

/** One mounted Play view: its elements and the puzzle it shows. */
interface PlayView {
  el: PlayElements;
  tags: Map<string, TagInfo>;
  info: TagInfo | null;
  seed: number;
  actions: string[];
  result: PlayResult | null;
  /** undefined: not asked for; null: the solver found none. */
  solution: string[] | null | undefined;
  animation: ReturnType<typeof setTimeout> | null;
  pulls: Pull[];
  /** Moves are applied one after another, however fast the keys come. */
  queue: Promise<void>;
}

export function mount(root: HTMLElement, params: URLSearchParams): () => void {
  const view: PlayView = {
    el: playElements(),
    tags: new Map(),
    info: null,
    seed: 0,
    actions: [],
    result: null,
    solution: undefined,
    animation: null,
    pulls: [],
    queue: Promise.resolve(),
  };
  root.append(layout(view));

  const onKey = (event: KeyboardEvent) => handleKey(view, event);
  document.addEventListener("keydown", onKey);
  const onHashChange = () => {
    const { view: shown, params: wanted } = route();
    if (shown === "play" && view.tags.size > 0) follow(view, wanted);
  };
  window.addEventListener("hashchange", onHashChange);

  void envs()
    .then((catalogue) => {
      view.tags = catalogue;
      view.el.tagSelect.append(...[...catalogue.keys()].map((tag) => h("option", { value: tag }, tag)));
      follow(view, route().view === "play" ? route().params : params);
    })
    .catch((error) => report(view, error));

  return () => {
    stopAnimation(view);
    document.removeEventListener("keydown", onKey);
    window.removeEventListener("hashchange", onHashChange);
  };
}

function playElements(): PlayElements {
  return {
    tagSelect: h("select", { id: "play-tag" }),
    seedInput: h("input", { id: "play-seed", type: "number", min: 0, max: MAX_SEED, value: "0" }),
    board: h("div", { class: "board-holder", "aria-live": "polite" }),
    status: h("div", { class: "status", role: "status" }),
    pad: h("div", { class: "pad" }),
    actionButtons: h("div", { class: "actions" }),
    tools: h("div", { class: "tools" }),
    solutionBox: h("div", { class: "solution" }),
    stateText: h("pre", { class: "state-text", "aria-label": "State text" }),
    prompt: h("pre", { class: "prompt" }),
    history: h("ol", { class: "moves" }),
    notice: h("p", { class: "notice", role: "alert", hidden: true }),
  };
}

/** The view's section: the tag and seed form, the board with its controls, the text the model reads. */
function layout(view: PlayView): HTMLElement {
  const { tagSelect, seedInput } = view.el;
  tagSelect.addEventListener("change", () => choose(view, tagSelect.value, view.seed));
  const form = h(
    "form",
    {
      class: "controls",
      onsubmit: (event: Event) => {
        event.preventDefault();
        choose(view, tagSelect.value, Number(seedInput.value) || 0);
        // Enter in the seed box loads the puzzle; the arrow keys then move, not the seed.
        if (document.activeElement instanceof HTMLElement) document.activeElement.blur();
      },
    },
    h("label", {}, "Tag ", tagSelect),
    h("label", {}, "Seed ", seedInput),
    h("button", { type: "submit" }, "Load"),
    h(
      "button",
      { type: "button", onclick: () => choose(view, tagSelect.value, randomSeed()) },
      "Random seed",
    ),
  );
  const { board, status, pad, actionButtons, tools, solutionBox } = view.el;
  return h(
    "section",
    { class: "play" },
    form,
    view.el.notice,
    h(
      "div",
      { class: "columns" },
      h(
        "div",
        { class: "board-column" },
        board,
        h("div", { class: "side" }, status, pad, actionButtons, tools, solutionBox),
      ),
      h(
        "div",
        { class: "text-column" },
        h("h2", {}, "What the model reads"),
        view.el.stateText,
        h("details", {}, h("summary", {}, "Full prompt for this state"), view.el.prompt),
        h("h2", {}, "Moves"),
        view.el.history,
        h(
          "p",
          { class: "muted keys" },
          "Keys: arrows or WASD move, 1–9 play the numbered actions, U or Backspace undoes, R resets, H shows the solution, N loads a random seed.",
        ),
      ),
    ),
  );
}

const randomSeed = () => Math.floor(Math.random() * 1_000_000);

function stopAnimation(view: PlayView): void {
  if (view.animation) clearTimeout(view.animation);
  view.animation = null;
}

function report(view: PlayView, error: unknown): void {
  view.el.status.replaceChildren(
    h("span", { class: "bad" }, error instanceof Error ? error.message : String(error)),
  );
}

/**
 * The trajectory of the current actions, from the server; the URL follows. Whatever cannot be
 * shown (a remote tag, a refused request) empties the board, so no other puzzle stays drawn.
 */
async function load(view: PlayView): Promise<void> {
  const { info, seed, actions } = view;
  if (!info) return;
  setParams({ tag: info.tag, seed, actions: actions.join(",") });
  if (remote(info)) {
    clear(view);
    view.el.status.replaceChildren(h("p", { class: "bad", "data-testid": "remote" }, remoteNote(info, seed)));
    return;
  }
  const query = new URLSearchParams({ seed: String(seed), actions: actions.join(",") });
  try {
    view.result = await api<PlayResult>(`/v1/envs/${encodeURIComponent(info.tag)}/play?${query}`);
  } catch (error) {
    clear(view);
    throw error;
  }
  draw(view);
}

/** A tag whose episodes run on an OpenEnv server: the page steps envs in process only. */
const remote = (info: TagInfo) => info.env_type === "openenv";

function remoteNote(info: TagInfo, seed: number): string {
  return (
    `${info.tag} runs on a remote OpenEnv server (env_type openenv), which this page does not ` +
    `step. Roll it out (Watch, rollgym rollout), or see it from a terminal: rollgym envs prompt ` +
    `${info.tag} --seed ${seed}, rollgym envs check ${info.tag}.`
  );
}

/** No puzzle shown: the board, its controls, the text and the moves are emptied. */
function clear(view: PlayView): void {
  view.result = null;
  const { board, pad, actionButtons, tools, solutionBox, history, status } = view.el;
  for (const el of [board, pad, actionButtons, tools, solutionBox, history, status]) el.replaceChildren();
  view.el.stateText.textContent = "";
  view.el.prompt.textContent = "";
}

/** Loads the current puzzle and actions after the moves already queued. */
function queueLoad(view: PlayView): void {
  view.queue = view.queue.then(() => load(view)).catch((error) => report(view, error));
}

function choose(view: PlayView, tag: string, seed: number): void {
  stopAnimation(view);
  view.el.notice.hidden = true;
  view.info = view.tags.get(tag) ?? view.info;
  view.seed = seed;
  view.el.seedInput.value = String(seed);
  view.actions = [];
  view.solution = undefined;
  queueLoad(view);
}

function act(view: PlayView, name: string): void {
  view.queue = view.queue
    .then(async () => {
      if (!view.result || view.result.done) return;
      view.actions.push(name);
      view.solution = undefined;
      await load(view);
      if (view.info?.env_type === "bandit" && view.result?.done) {
        view.pulls.push({ seed: view.seed, arm: name, reward: view.result.reward });
        draw(view);
      }
    })
    .catch((error) => report(view, error));
}

function undo(view: PlayView): void {
  stopAnimation(view);
  if (view.actions.length === 0) return;
  view.actions.pop();
  view.solution = undefined;
  queueLoad(view);
}

function reset(view: PlayView): void {
  stopAnimation(view);
  view.actions = [];
  view.solution = undefined;
  queueLoad(view);
}

async function reveal(view: PlayView): Promise<void> {
  const { info, result, seed, actions } = view;
  if (!info || !result || result.done) return;
  const query = new URLSearchParams({ seed: String(seed), actions: actions.join(","), solve: "1" });
  const solved = await api<PlayResult>(`/v1/envs/${encodeURIComponent(info.tag)}/play?${query}`);
  view.solution = solved.solution ?? null;
  draw(view);
}

const revealShown = (view: PlayView) => void reveal(view).catch((error) => report(view, error));

/** Plays the shown solution one action per ANIMATION_MS. */
function animate(view: PlayView): void {
  stopAnimation(view);
  const steps = [...(view.solution ?? [])];
  const next = () => {
    const action = steps.shift();
    if (!action) return;
    act(view, action);
    view.animation = setTimeout(next, ANIMATION_MS);
  };
  next();
}

/** The action a direction key or button plays: by the env type's ids, else by its name. */
function moveFor(view: PlayView, direction: string): string | null {
  const { info, result } = view;
  const id = info ? DIRECTIONS[info.env_type]?.[direction] : undefined;
  if (id !== undefined) return info?.config.action_lookup?.[id] ?? null;
  // An env of the user's own (a plugin): its actions called Up, Left … are directions too.
  return result?.action_names.find((a) => a.toLowerCase() === direction.toLowerCase()) ?? null;
}

function handleKey(view: PlayView, event: KeyboardEvent): void {
  const { info, result } = view;
  if (typing(event) || !info || !result) return;
  const key = event.key.length === 1 ? event.key.toLowerCase() : event.key;
  const direction = KEYS[key];
  let handled = true;
  if (direction && info.env_type !== "bandit") {
    const name = moveFor(view, direction);
    if (name) act(view, name);
  } else if (/^[1-9]$/.test(key) && Number(key) <= result.action_names.length)
    act(view, result.action_names[Number(key) - 1]);
  else if (key === "u" || key === "Backspace") undo(view);
  else if (key === "r") reset(view);
  else if (key === "h") revealShown(view);
  else if (key === "n") choose(view, info.tag, info.env_type === "bandit" ? view.seed + 1 : randomSeed());
  else handled = false;
  if (handled) event.preventDefault();
}

/**
 * Shows what the URL names (tag, seed, moves): on opening, and whenever the URL changes under
 * the page (an edited address, Back or Forward), so the board never shows another puzzle than
 * the URL and the next move never writes a stale one back. What it cannot show, it says.
 */
function follow(view: PlayView, wanted: URLSearchParams): void {
  const problems: string[] = [];
  const tagText = wanted.get("tag");
  let next = view.info ?? view.tags.get("SimpleSokoban") ?? [...view.tags.values()][0];
  if (tagText !== null && view.tags.has(tagText)) next = view.tags.get(tagText)!;
  else if (tagText !== null)
    problems.push(`unknown tag ${JSON.stringify(tagText)} in the link; showing ${next.tag}`);
  const seedText = wanted.get("seed") ?? "0";
  let nextSeed = Number(seedText);
  if (!/^\d+$/.test(seedText) || nextSeed > MAX_SEED) {
    problems.push(
      `seed ${JSON.stringify(seedText)} in the link is not an integer in [0, ${MAX_SEED}]; showing seed 0`,
    );
    nextSeed = 0;
  }
  const nextActions = wanted.get("actions")?.split(",").filter(Boolean) ?? [];
  view.el.notice.textContent = problems.join(". ");
  view.el.notice.hidden = problems.length === 0;
  const same =
    next === view.info && nextSeed === view.seed && nextActions.join(",") === view.actions.join(",");
  if (same && view.result) return;
  stopAnimation(view);
  view.info = next;
  view.el.tagSelect.value = next.tag;
  view.seed = nextSeed;
  view.el.seedInput.value = String(nextSeed);
  view.actions = nextActions;
  view.solution = undefined;
  queueLoad(view);
}

/** Redraws everything the last trajectory shows. */
function draw(view: PlayView): void {
  const { info, result } = view;
  if (!info || !result) return;
  drawState(view, info, result);
  drawStatus(view, info, result);
  view.el.pad.replaceChildren();
  view.el.actionButtons.replaceChildren();
  if (info.env_type === "bandit") drawArms(view, result);
  else drawMoves(view, result);
  drawTools(view, result);
  drawSolution(view, result);
}

/** The board, the state text and prompt beside it, and the moves so far. */
function drawState(view: PlayView, info: TagInfo, r: PlayResult): void {
  const state = r.states.at(-1)!;
  const picture = stateSvg(state, info, `${info.tag} seed ${view.seed}`);
  // An env with no picture (a plugin's own) is played on its text.
  view.el.board.replaceChildren(
    picture ? markup(picture) : h("pre", { class: "board-text", "aria-label": "Board" }, state),
  );
  view.el.stateText.textContent = state;
  view.el.prompt.textContent = r.messages.map((m) => `[${m.role}]\n${m.content}`).join("\n");
  view.el.history.replaceChildren(
    ...r.steps.map((step) =>
      h("li", {}, `${step.action}: ${num(step.reward)}${step.effective ? "" : " (no effect)"}`),
    ),
  );
}

/** Reward, last step, actions left, and the outcome in words. */
function drawStatus(view: PlayView, info: TagInfo, r: PlayResult): void {
  const last = r.steps.at(-1);
  view.el.status.replaceChildren(
    h(
      "dl",
      {},
      h("dt", {}, "Reward"),
      h("dd", { "data-testid": "reward" }, num(r.reward)),
      h("dt", {}, "Last step"),
      h("dd", {}, last ? `${last.action} → ${num(last.reward)}${last.effective ? "" : " (no effect)"}` : "–"),
      h("dt", {}, "Actions"),
      h("dd", {}, `${r.steps.length} of ${r.budget} (${r.budget - r.steps.length} left)`),
      h("dt", {}, "Done"),
      h("dd", {}, r.done ? "yes" : "no"),
    ),
    h("p", { class: "outcome", "data-testid": "outcome" }, outcome(info, r)),
  );
}

function outcome(info: TagInfo, r: PlayResult): HTMLElement {
  const bandit = info.env_type === "bandit";
  if (r.success) return h("strong", { class: "good" }, bandit ? "Success! (the high arm)" : "Success!");
  if (bandit && r.done) return h("strong", { class: "bad" }, "No success (the low arm)");
  if (r.end_reason === "done") return h("strong", { class: "bad" }, "Failed: the episode ended");
  if (r.end_reason === "action_budget")
    return h("strong", { class: "bad" }, "Failed: the action budget is spent");
  return h("span", {}, "Playing");
}

/** A bandit's arms are the picture: one big button each, then the running reward over pulls. */
function drawArms(view: PlayView, r: PlayResult): void {
  const { pulls } = view;
  const chosen = r.steps[0]?.action;
  const total = pulls.reduce((sum, p) => sum + p.reward, 0);
  view.el.board.replaceChildren();
  append(view.el.board, [
    h(
      "div",
      { class: "arms" },
      r.action_names.map((arm, i) =>
        h(
          "button",
          {
            type: "button",
            class: `arm${chosen === arm ? " chosen" : ""}`,
            disabled: r.done,
            onclick: () => act(view, arm),
          },
          h("span", { class: "key" }, String(i + 1)),
          ` Pull ${arm}`,
          chosen === arm ? h("strong", {}, ` → ${num(r.reward)}`) : null,
        ),
      ),
    ),
    h(
      "p",
      { class: "running", "data-testid": "running" },
      `Running reward: ${num(total)} over ${pulls.length} pull${pulls.length === 1 ? "" : "s"}`,
      pulls.length ? ` (mean ${num(total / pulls.length)})` : "",
    ),
    h(
      "button",
      { type: "button", onclick: () => choose(view, view.info!.tag, view.seed + 1) },
      "Next seed (N)",
    ),
    pulls.length
      ? h(
          "ol",
          { class: "moves" },
          pulls.map((p) => h("li", {}, `seed ${p.seed}: ${p.arm} → ${num(p.reward)}`)),
        )
      : null,
  ]);
}

/** The direction pad, then one numbered button for each action no direction plays. */
function drawMoves(view: PlayView, r: PlayResult): void {
  const dirs = ["Up", "Left", "Down", "Right"];
  const byDirection = new Map(dirs.map((d) => [d, moveFor(view, d)]));
  if ([...byDirection.values()].some((name) => name !== null)) {
    view.el.pad.append(
      ...dirs.map((d) => {
        const name = byDirection.get(d);
        return h(
          "button",
          {
            type: "button",
            class: `dir ${d.toLowerCase()}`,
            disabled: !name || r.done,
            onclick: () => name && act(view, name),
          },
          name ?? d,
        );
      }),
    );
  }
  // Actions no direction plays (all of them for an env without directions): one button
  // each, with its number key.
  const directed = new Set(byDirection.values());
  const others = r.action_names.filter((a) => !directed.has(a));
  append(
    view.el.actionButtons,
    others.map((a) =>
      h(
        "button",
        { type: "button", disabled: r.done, onclick: () => act(view, a) },
        h("span", { class: "key" }, String(r.action_names.indexOf(a) + 1)),
        ` ${a}`,
      ),
    ),
  );
}

function drawTools(view: PlayView, r: PlayResult): void {
  const untouched = view.actions.length === 0;
  view.el.tools.replaceChildren(
    h("button", { type: "button", onclick: () => undo(view), disabled: untouched }, "Undo (U)"),
    h("button", { type: "button", onclick: () => reset(view), disabled: untouched }, "Reset (R)"),
    h("button", { type: "button", onclick: () => revealShown(view), disabled: r.done }, "Show solution (H)"),
  );
}

function drawSolution(view: PlayView, r: PlayResult): void {
  const { solution, el } = view;
  el.solutionBox.replaceChildren();
  if (solution === null) el.solutionBox.append(h("p", {}, "The solver finds no solution from here."));
  else if (solution) {
    const left = r.budget - r.steps.length;
    el.solutionBox.append(
      h(
        "p",
        {},
        `Shortest solution (${solution.length}): ${solution.join(", ")}`,
        solution.length > left ? ` — longer than the ${left} actions left` : "",
        r.success_probability !== undefined ? ` · success probability ${num(r.success_probability)}` : "",
      ),
      h("button", { type: "button", onclick: () => animate(view) }, "Animate"),
    );
  }
}
