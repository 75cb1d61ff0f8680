// `rollgym envs play TAG --seed N` on a terminal: the episode as a game. Arrow keys or WASD move
// (for envs with Up/Down/Left/Right actions), digits pick the n-th action, u undoes, r resets,
// q or Ctrl-C quits. Undo restores an env snapshot, so it is exact for every env; the action
// budget and the totals are the env wrappers' (envs/wrappers), kept in that snapshot too.
import type { ResolvedTag } from "../../envs/registry.ts";
import type { JsonValue } from "../../envs/types.ts";
import { ActionBudget } from "../../envs/wrappers/action-budget.ts";
import { EpisodeStatistics } from "../../envs/wrappers/episode-statistics.ts";
import { io } from "./io.ts";

const KEYS: Readonly<Record<string, string>> = {
  "\u001b[A": "Up",
  "\u001b[B": "Down",
  "\u001b[C": "Right",
  "\u001b[D": "Left",
  "\u001bOA": "Up",
  "\u001bOB": "Down",
  "\u001bOC": "Right",
  "\u001bOD": "Left",
  w: "Up",
  s: "Down",
  d: "Right",
  a: "Left",
};

const ESC = "\u001b";

/** Splits a chunk of terminal input into keys, escape sequences (arrow keys) kept whole. */
function keysOf(chunk: string): string[] {
  const keys: string[] = [];
  for (let i = 0; i < chunk.length; ) {
    if (chunk[i] === ESC && (chunk[i + 1] === "[" || chunk[i + 1] === "O")) {
      let end = i + 2;
      while (end < chunk.length && /[0-9;]/.test(chunk[end])) end++;
      keys.push(chunk.slice(i, end + 1));
      i = end + 1;
    } else {
      const key = String.fromCodePoint(chunk.codePointAt(i)!);
      keys.push(key);
      i += key.length;
    }
  }
  return keys;
}

export async function playInteractive(tag: ResolvedTag, seed: number): Promise<void> {
  const { stdin, stdout } = io();
  const budget = new ActionBudget(tag.make(), tag.spec.max_actions_per_traj);
  const env = new EpisodeStatistics(budget);
  let observation = env.reset(seed);
  let history: JsonValue[] = [];
  let message = "";
  let solved = false;

  const action = (key: string): number | null => {
    const named = KEYS[key.length === 1 ? key.toLowerCase() : key];
    if (named) {
      const id = env.actionNames.indexOf(named);
      return id < 0 ? null : id + 1;
    }
    if (/^[1-9]$/.test(key) && Number(key) <= env.actionNames.length) return Number(key);
    return null;
  };
  const draw = (): void => {
    const keys = env.actionNames.map((name, i) => `${i + 1} ${name}`).join(", ");
    const arrows = env.actionNames.some((n) => ["Up", "Down", "Left", "Right"].includes(n))
      ? "arrows/WASD move, "
      : "";
    const lines = [
      `${tag.spec.tag} seed ${seed}: ${env.episodeLength} actions of ${budget.maxActions}, reward ${round(env.episodeReturn)}`,
      "",
      ...observation.split("\n"),
      "",
      message,
      `${arrows}keys ${keys}; u undo, r reset, q quit`,
    ];
    // Clear the screen and draw from the top: the board never scrolls away.
    stdout.write(`\u001b[2J\u001b[H${lines.join("\r\n")}\r\n`);
  };

  draw();
  stdin.setRawMode?.(true);
  stdin.resume();
  try {
    for await (const chunk of stdin) {
      const text = typeof chunk === "string" ? chunk : (chunk as Buffer).toString("utf8");
      let quit = false;
      for (const key of keysOf(text)) {
        if (key === "q" || key === "Q" || key === "\u0003" || key === "\u0004") {
          quit = true;
          break;
        }
        if (key === "u" || key === "U") {
          const last = history.pop();
          if (last !== undefined) {
            env.restore(last);
            observation = env.render();
            solved = false;
            message = "undone";
          } else message = "nothing to undo";
          continue;
        }
        if (key === "r" || key === "R") {
          observation = env.reset(seed);
          history = [];
          solved = false;
          message = "reset";
          continue;
        }
        const id = action(key);
        if (id === null) {
          message = `key ${JSON.stringify(key)} does nothing here`;
          continue;
        }
        if (env.done) {
          message = "the episode is over: u undo, r reset, q quit";
          continue;
        }
        history.push(env.snapshot());
        const result = env.step(id);
        observation = result.observation;
        const name = env.actionNames[id - 1];
        message = `${name}: reward ${round(result.reward)}${result.info.action_is_effective ? "" : " (no effect)"}`;
        if (result.terminated || result.truncated) {
          solved = result.info.success;
          message += solved ? " - solved!" : " - episode over";
        } else if (budget.endedByBudget) {
          message += ` - action budget (${budget.maxActions}) spent`;
        }
      }
      draw();
      if (quit) break;
    }
  } finally {
    stdin.setRawMode?.(false);
    stdin.pause();
  }
  stdout.write(
    `${solved ? "solved" : "quit"} after ${env.episodeLength} actions, reward ${round(env.episodeReturn)}\r\n`,
  );
}

function round(value: number): string {
  return String(Math.round(value * 1e6) / 1e6);
}
