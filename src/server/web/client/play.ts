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

export function mount(root: HTMLElement, params: URLSearchParams): () => void {
  let tags = new Map<string, TagInfo>();
  let info: TagInfo | null = null;
  let seed = 0;
  let actions: string[] = [];
  let result: PlayResult | null = null;
  let solution: string[] | null | undefined;
  let animation: ReturnType<typeof setTimeout> | null = null;
  const pulls: Pull[] = [];
  // Moves are applied one after another, however fast the keys come.
  let queue = Promise.resolve();

  const tagSelect = h("select", { id: "play-tag", onchange: () => choose(tagSelect.value, seed) });
  const seedInput = h("input", {
    id: "play-seed",
    type: "number",
    min: 0,
    max: MAX_SEED,
    value: String(seed),
  });
  const board = h("div", { class: "board-holder", "aria-live": "polite" });
  const status = h("div", { class: "status", role: "status" });
  const pad = h("div", { class: "pad" });
  const actionButtons = h("div", { class: "actions" });
  const tools = h("div", { class: "tools" });
  const solutionBox = h("div", { class: "solution" });
  const stateText = h("pre", { class: "state-text", "aria-label": "State text" });
  const prompt = h("pre", { class: "prompt" });
  const history = h("ol", { class: "moves" });
  // What the URL asked for and could not be shown (an unknown tag, a bad seed).
  const notice = h("p", { class: "notice", role: "alert", hidden: true });

  root.append(
    h(
      "section",
      { class: "play" },
      h(
        "form",
        {
          class: "controls",
          onsubmit: (event: Event) => {
            event.preventDefault();
            choose(tagSelect.value, Number(seedInput.value) || 0);
            // Enter in the seed box loads the puzzle; the arrow keys then move, not the seed.
            if (document.activeElement instanceof HTMLElement) document.activeElement.blur();
          },
        },
        h("label", {}, "Tag ", tagSelect),
        h("label", {}, "Seed ", seedInput),
        h("button", { type: "submit" }, "Load"),
        h(
          "button",
          { type: "button", onclick: () => choose(tagSelect.value, Math.floor(Math.random() * 1_000_000)) },
          "Random seed",
        ),
      ),
      notice,
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
          stateText,
          h("details", {}, h("summary", {}, "Full prompt for this state"), prompt),
          h("h2", {}, "Moves"),
          history,
          h(
            "p",
            { class: "muted keys" },
            "Keys: arrows or WASD move, 1–9 play the numbered actions, U or Backspace undoes, R resets, H shows the solution, N loads a random seed.",
          ),
        ),
      ),
    ),
  );

  const stop = () => {
    if (animation) clearTimeout(animation);
    animation = null;
  };

  const load = async () => {
    if (!info) return;
    setParams({ tag: info.tag, seed, actions: actions.join(",") });
    const query = new URLSearchParams({ seed: String(seed), actions: actions.join(",") });
    result = await api<PlayResult>(`/v1/envs/${encodeURIComponent(info.tag)}/play?${query}`);
    draw();
  };

  const choose = (tag: string, newSeed: number) => {
    stop();
    notice.hidden = true;
    info = tags.get(tag) ?? info;
    seed = newSeed;
    seedInput.value = String(seed);
    actions = [];
    solution = undefined;
    queue = queue.then(load).catch(report);
  };

  const act = (name: string) => {
    queue = queue
      .then(async () => {
        if (!result || result.done) return;
        actions.push(name);
        solution = undefined;
        await load();
        if (info?.env_type === "bandit" && result?.done) {
          pulls.push({ seed, arm: name, reward: result.reward });
          draw();
        }
      })
      .catch(report);
  };

  const undo = () => {
    stop();
    if (actions.length === 0) return;
    actions.pop();
    solution = undefined;
    queue = queue.then(load).catch(report);
  };

  const reset = () => {
    stop();
    actions = [];
    solution = undefined;
    queue = queue.then(load).catch(report);
  };

  const reveal = async () => {
    if (!info || !result || result.done) return;
    const query = new URLSearchParams({ seed: String(seed), actions: actions.join(","), solve: "1" });
    const solved = await api<PlayResult>(`/v1/envs/${encodeURIComponent(info.tag)}/play?${query}`);
    solution = solved.solution ?? null;
    draw();
  };

  const animate = () => {
    stop();
    const steps = [...(solution ?? [])];
    const next = () => {
      const action = steps.shift();
      if (!action) return;
      act(action);
      animation = setTimeout(next, ANIMATION_MS);
    };
    next();
  };

  const report = (error: unknown) => {
    status.replaceChildren(
      h("span", { class: "bad" }, error instanceof Error ? error.message : String(error)),
    );
  };

  /** The action a direction key or button plays: by the env type's ids, else by its name. */
  const moveButton = (direction: string) => {
    const id = info ? DIRECTIONS[info.env_type]?.[direction] : undefined;
    if (id !== undefined) return info?.config.action_lookup?.[id] ?? null;
    // An env of the user's own (a plugin): its actions called Up, Left … are directions too.
    return result?.action_names.find((a) => a.toLowerCase() === direction.toLowerCase()) ?? null;
  };

  function draw(): void {
    if (!info || !result) return;
    const r = result;
    const state = r.states.at(-1)!;
    const picture = stateSvg(state, info, `${info.tag} seed ${seed}`);
    // An env with no picture (a plugin's own) is played on its text.
    board.replaceChildren(
      picture ? markup(picture) : h("pre", { class: "board-text", "aria-label": "Board" }, state),
    );
    stateText.textContent = state;
    prompt.textContent = r.messages.map((m) => `[${m.role}]\n${m.content}`).join("\n");
    const last = r.steps.at(-1);
    const bandit = info.env_type === "bandit";
    const outcome = r.success
      ? h("strong", { class: "good" }, bandit ? "Success! (the high arm)" : "Success!")
      : bandit && r.done
        ? h("strong", { class: "bad" }, "No success (the low arm)")
        : r.end_reason === "done"
          ? h("strong", { class: "bad" }, "Failed: the episode ended")
          : r.end_reason === "action_budget"
            ? h("strong", { class: "bad" }, "Failed: the action budget is spent")
            : h("span", {}, "Playing");
    status.replaceChildren(
      h(
        "dl",
        {},
        h("dt", {}, "Reward"),
        h("dd", { "data-testid": "reward" }, num(r.reward)),
        h("dt", {}, "Last step"),
        h(
          "dd",
          {},
          last ? `${last.action} → ${num(last.reward)}${last.effective ? "" : " (no effect)"}` : "–",
        ),
        h("dt", {}, "Actions"),
        h("dd", {}, `${r.steps.length} of ${r.budget} (${r.budget - r.steps.length} left)`),
        h("dt", {}, "Done"),
        h("dd", {}, r.done ? "yes" : "no"),
      ),
      h("p", { class: "outcome", "data-testid": "outcome" }, outcome),
    );
    history.replaceChildren(
      ...r.steps.map((step) =>
        h("li", {}, `${step.action}: ${num(step.reward)}${step.effective ? "" : " (no effect)"}`),
      ),
    );
    pad.replaceChildren();
    actionButtons.replaceChildren();
    if (info.env_type === "bandit") {
      // The arms are the picture: one big button each, then the running reward over pulls.
      const chosen = r.steps[0]?.action;
      const total = pulls.reduce((sum, p) => sum + p.reward, 0);
      board.replaceChildren();
      append(board, [
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
                onclick: () => act(arm),
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
        h("button", { type: "button", onclick: () => choose(info!.tag, seed + 1) }, "Next seed (N)"),
        pulls.length
          ? h(
              "ol",
              { class: "moves" },
              pulls.map((p) => h("li", {}, `seed ${p.seed}: ${p.arm} → ${num(p.reward)}`)),
            )
          : null,
      ]);
    } else {
      const dirs = ["Up", "Left", "Down", "Right"];
      const byDirection = new Map(dirs.map((d) => [d, moveButton(d)]));
      if ([...byDirection.values()].some((name) => name !== null)) {
        pad.append(
          ...dirs.map((d) => {
            const name = byDirection.get(d);
            return h(
              "button",
              {
                type: "button",
                class: `dir ${d.toLowerCase()}`,
                disabled: !name || r.done,
                onclick: () => name && act(name),
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
        actionButtons,
        others.map((a) =>
          h(
            "button",
            { type: "button", disabled: r.done, onclick: () => act(a) },
            h("span", { class: "key" }, String(r.action_names.indexOf(a) + 1)),
            ` ${a}`,
          ),
        ),
      );
    }
    tools.replaceChildren(
      h("button", { type: "button", onclick: undo, disabled: actions.length === 0 }, "Undo (U)"),
      h("button", { type: "button", onclick: reset, disabled: actions.length === 0 }, "Reset (R)"),
      h(
        "button",
        { type: "button", onclick: () => void reveal().catch(report), disabled: r.done },
        "Show solution (H)",
      ),
    );
    solutionBox.replaceChildren();
    if (solution === null) solutionBox.append(h("p", {}, "The solver finds no solution from here."));
    else if (solution) {
      const left = r.budget - r.steps.length;
      solutionBox.append(
        h(
          "p",
          {},
          `Shortest solution (${solution.length}): ${solution.join(", ")}`,
          solution.length > left ? ` — longer than the ${left} actions left` : "",
          r.success_probability !== undefined ? ` · success probability ${num(r.success_probability)}` : "",
        ),
        h("button", { type: "button", onclick: animate }, "Animate"),
      );
    }
  }

  const onKey = (event: KeyboardEvent) => {
    if (typing(event) || !info || !result) return;
    const key = event.key.length === 1 ? event.key.toLowerCase() : event.key;
    const direction = KEYS[key];
    let handled = true;
    if (direction && info.env_type !== "bandit") {
      const name = moveButton(direction);
      if (name) act(name);
    } else if (/^[1-9]$/.test(key) && Number(key) <= result.action_names.length)
      act(result.action_names[Number(key) - 1]);
    else if (key === "u" || key === "Backspace") undo();
    else if (key === "r") reset();
    else if (key === "h") void reveal().catch(report);
    else if (key === "n")
      choose(info.tag, info.env_type === "bandit" ? seed + 1 : Math.floor(Math.random() * 1_000_000));
    else handled = false;
    if (handled) event.preventDefault();
  };
  document.addEventListener("keydown", onKey);

  /**
   * Shows what the URL names (tag, seed, moves): on opening, and whenever the URL changes under
   * the page (an edited address, Back or Forward), so the board never shows another puzzle than
   * the URL and the next move never writes a stale one back. What it cannot show, it says.
   */
  const follow = (wanted: URLSearchParams) => {
    const problems: string[] = [];
    const tagText = wanted.get("tag");
    let next = info ?? tags.get("SimpleSokoban") ?? [...tags.values()][0];
    if (tagText !== null && tags.has(tagText)) next = tags.get(tagText)!;
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
    notice.textContent = problems.join(". ");
    notice.hidden = problems.length === 0;
    if (next === info && nextSeed === seed && nextActions.join(",") === actions.join(",") && result) return;
    stop();
    info = next;
    tagSelect.value = info.tag;
    seed = nextSeed;
    seedInput.value = String(seed);
    actions = nextActions;
    solution = undefined;
    queue = queue.then(load).catch(report);
  };
  const onHashChange = () => {
    const { view, params: wanted } = route();
    if (view === "play" && tags.size > 0) follow(wanted);
  };
  window.addEventListener("hashchange", onHashChange);

  void envs()
    .then((catalogue) => {
      tags = catalogue;
      tagSelect.append(...[...tags.keys()].map((tag) => h("option", { value: tag }, tag)));
      follow(route().view === "play" ? route().params : params);
    })
    .catch(report);

  return () => {
    stop();
    document.removeEventListener("keydown", onKey);
    window.removeEventListener("hashchange", onHashChange);
  };
}
