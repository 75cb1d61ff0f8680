// The mock engine's built-in policy: answers a RAGEN prompt in RAGEN's format with random
// valid actions read from the prompt itself, and is sometimes malformed on purpose.
import type { Rng } from "./rng.ts";

export type FormatErrorKind =
  /** `<answer>` is never closed: the tag regex does not match. */
  | "missing-answer-close"
  /** `</think>` is missing: the think-mode regex does not match. */
  | "missing-think-close"
  /** Plain prose, no tags at all. */
  | "no-tags"
  /** Well-formed tags around an action name that is not in the vocabulary. */
  | "invalid-action";

export interface ActionSpace {
  actions: string[];
  /** "action-list": the system prompt's "Your available actions are:" line; "bandit": the two arm names. */
  source: "action-list" | "bandit" | "fallback";
  /** Most actions one answer may hold: 1 for the bandit, or the prompt's "actions left" count. */
  maxActions: number;
}

export interface PolicyOptions {
  /** Probability that an answer is malformed (one of FormatErrorKind, uniformly). Default 0. */
  formatErrorRate?: number;
  /** Actions per answer; default 1 or 2 at random. Never more than the prompt allows. */
  answerActions?: 1 | 2;
  /** Used when the prompt names no actions (e.g. a load test with arbitrary prompts). */
  fallbackActions?: readonly string[];
}

/** How the prompt ends decides what the model still has to write. */
export type AnswerMode =
  /** After a bare assistant header: write `<think>…</think><answer>…</answer>`. */
  | "think"
  /** The prompt ends in "<think>" (RAGEN's prefill): continue with `…</think><answer>…</answer>`. */
  | "continue-think"
  /** The prompt asks for `<answer>` only, or thinking was closed already. */
  | "answer"
  /** The prompt ends in "<answer>" (no-think prefill): continue with `…</answer>`. */
  | "continue-answer";

export interface PolicyAnswer {
  /** Exactly what the model generates (without the end-of-turn token). */
  text: string;
  /** The actions it meant to take (valid names, even when formatError spoils them). */
  actions: string[];
  formatError: FormatErrorKind | null;
  mode: AnswerMode;
  /**
   * Where padding may go without changing what RAGEN parses: inside the thought in think
   * modes, before `<answer>` in "answer" mode, after `</answer>` in "continue-answer" mode
   * (RAGEN drops text after `</answer>`), at the end of tagless prose.
   */
  padAt: number;
}

export const DEFAULT_FALLBACK_ACTIONS: readonly string[] = ["Up", "Down", "Left", "Right"];
const INVALID_NAMES: readonly string[] = ["Jump", "Wait", "Stay", "North", "Teleport"];
const THOUGHTS: readonly string[] = [
  "Let me try {a}.",
  "I will move {a}.",
  "{a} seems best.",
  "Moving {a} looks safe.",
  "I should go {a} first.",
];

const ACTION_LIST_RE = /Your available actions are:\n([^\n]*)/;
const BANDIT_RE = /There are 2 arms, named ([^\n]+?) and ([^\n]+?)\s*\n/;
const ACTIONS_LEFT_RE = /You have (\d+) actions left\./g;

export function readActionSpace(prompt: string, fallback = DEFAULT_FALLBACK_ACTIONS): ActionSpace {
  let actions: string[] = [];
  let source: ActionSpace["source"] = "fallback";
  let maxActions = 2;
  const list = ACTION_LIST_RE.exec(prompt);
  const bandit = list === null ? BANDIT_RE.exec(prompt) : null;
  if (list !== null) {
    actions = list[1]
      .split(", ")
      .map((a) => a.trim())
      .filter((a) => a.length > 0);
    source = "action-list";
  } else if (bandit !== null) {
    actions = [bandit[1].trim(), bandit[2].trim()];
    source = "bandit";
    maxActions = 1; // one pull per episode
  }
  if (actions.length === 0) {
    actions = [...fallback];
    source = "fallback";
  }
  // The latest turn's budget is the last "actions left" line.
  let left: number | undefined;
  for (const m of prompt.matchAll(ACTIONS_LEFT_RE)) left = Number(m[1]);
  if (left !== undefined && left >= 1) maxActions = Math.min(maxActions, left);
  return { actions, source, maxActions };
}

export function answerMode(prompt: string): AnswerMode {
  if (/<think>\s*$/.test(prompt)) return "continue-think";
  if (/<answer>\s*$/.test(prompt)) return "continue-answer";
  if (/<\/think>\s*$/.test(prompt)) return "answer";
  // RAGEN's per-turn instruction says which format it wants; the last one is the current turn.
  const at = prompt.lastIndexOf("Always output: ");
  if (at >= 0 && prompt.startsWith("<answer>", at + "Always output: ".length)) return "answer";
  return "think";
}

function invalidName(actions: readonly string[], rng: Rng): string {
  const taken = new Set(actions.map((a) => a.toLowerCase()));
  const candidates = INVALID_NAMES.filter((n) => !taken.has(n.toLowerCase()));
  return candidates.length > 0 ? rng.pick(candidates) : "NotAnAction";
}

function errorKinds(mode: AnswerMode): readonly FormatErrorKind[] {
  switch (mode) {
    case "think":
    case "continue-think":
      return ["missing-answer-close", "missing-think-close", "no-tags", "invalid-action"];
    case "answer":
      return ["missing-answer-close", "no-tags", "invalid-action"];
    case "continue-answer":
      return ["missing-answer-close", "invalid-action"];
  }
}

/** One answer for `prompt` (the whole rendered prompt text). Draws only from `rng`. */
export function answerPrompt(prompt: string, rng: Rng, options: PolicyOptions = {}): PolicyAnswer {
  const space = readActionSpace(prompt, options.fallbackActions);
  const mode = answerMode(prompt);
  const malformed = rng.next() < (options.formatErrorRate ?? 0);
  const wanted = options.answerActions ?? 1 + rng.int(2);
  const count = Math.max(1, Math.min(wanted, space.maxActions));
  const actions = Array.from({ length: count }, () => rng.pick(space.actions));
  const thought = rng.pick(THOUGHTS).replace("{a}", actions.join(" then "));
  const formatError = malformed ? rng.pick(errorKinds(mode)) : null;

  let answer = actions.join(" || ");
  if (formatError === "invalid-action") {
    // Replace one action, so a two-action answer keeps a valid first action (RAGEN still
    // runs it and charges one penalty for the turn).
    const bad = invalidName(space.actions, rng);
    answer = count > 1 ? `${actions[0]} || ${bad}` : bad;
  }
  const closeAnswer = formatError === "missing-answer-close" ? "" : "</answer>";
  const closeThink = formatError === "missing-think-close" ? "" : "</think>";
  let text: string;
  let padAt: number;
  if (formatError === "no-tags") {
    text = `${mode === "continue-think" ? "" : "I think "}${actions.join(" and ")} is the way to go.`;
    padAt = text.length;
  } else if (mode === "think" || mode === "continue-think") {
    const open = mode === "think" ? "<think>" : "";
    text = `${open}${thought}${closeThink}<answer>${answer}${closeAnswer}`;
    padAt = open.length + thought.length;
  } else if (mode === "answer") {
    text = `<answer>${answer}${closeAnswer}`;
    padAt = 0;
  } else {
    text = `${answer}${closeAnswer}`;
    padAt = text.length;
  }
  return { text, actions, formatError, mode, padAt };
}

// Words that read as musing and name no action, tag or prompt phrase (so a padded answer that
// comes back in the next turn's prompt changes nothing the policy reads from it).
// Each is one token with its leading space in the toy and the Qwen3 tokenizer.
const PAD_WORDS: readonly string[] = (
  "the box is not at the goal I should think which move is safe then push it to the target " +
  "from the wall and choose next again"
).split(" ");

/** Padding of `words` words: " the box is not at …", cycling through PAD_WORDS. */
export function padding(words: number): string {
  let text = "";
  for (let i = 0; i < words; i++) text += ` ${PAD_WORDS[i % PAD_WORDS.length]}`;
  return text;
}

/** The answer with `extra` inserted at its padding point (see PolicyAnswer.padAt). */
export function padAnswer(answer: PolicyAnswer, extra: string): PolicyAnswer {
  if (extra === "") return answer;
  // Before `<answer>` ("answer" mode) the padding starts the text, so it drops its leading space
  // (and takes no trailing one, which would cost a token of its own).
  const insert = answer.padAt === 0 ? extra.trimStart() : extra;
  return { ...answer, text: answer.text.slice(0, answer.padAt) + insert + answer.text.slice(answer.padAt) };
}
