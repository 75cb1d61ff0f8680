// RAGEN's turn parser (ctx_manager._parse_response) and action mapping
// (es_manager._extract_map_valid_actions + the format-penalty test in step()).
// Text handling follows Python (see pytext.ts), not JavaScript.

import { pyIsSpaceCode, pyLower, pyStrip } from "./pytext.ts";

export interface ParseOptions {
  /** `agent_proxy.enable_think`: expect `<think>…</think>` before `<answer>…</answer>`. */
  think: boolean;
  /** `agent_proxy.action_sep`; default "||". */
  actionSep?: string;
  /** `agent_proxy.max_actions_per_turn`; default 2. Extra actions are dropped without penalty. */
  maxActionsPerTurn?: number;
}

export interface ParseResult {
  /** Action strings, stripped, empties removed, at most maxActionsPerTurn. */
  parsed: string[];
  /** What RAGEN stores and shows in later prompts: rebuilt on a match, the raw text otherwise. */
  llmResponse: string;
  /** Whether the tag regex matched. */
  matched: boolean;
}

export interface MappedActions {
  /** Action ids (actionNames index + 1), in parse order; unknown actions are dropped. */
  ids: number[];
  /** actionNames[id - 1] for each id (canonical spelling, not the model's). */
  names: string[];
  /** One format penalty for the turn: some action did not map, or none did. */
  formatPenalty: boolean;
}

export const DEFAULT_ACTION_SEP = "||";
export const DEFAULT_MAX_ACTIONS_PER_TURN = 2;

// Removed from both parts, one after another, stripping after each (RAGEN's order).
const SPECIAL_STRINGS: readonly string[] = [
  "<think>",
  "</think>",
  "<answer>",
  "</answer>",
  "<|im_start|>",
  "<|im_end|>",
];

/**
 * Python's `re.search(r"<think>(.*?)</think>\s*<answer>(.*?)</answer>", text, re.DOTALL)`
 * in linear time (the regex backtracks quadratically on "</think><think>" repeated). Only the
 * first "<think>" can start a match: a later start sees a subset of the same closing tags.
 * Group 1 ends at the first "</think>" that whitespace and "<answer>" follow; group 2 at the
 * first "</answer>" after that.
 */
export function searchThinkAnswer(text: string): [string, string] | null {
  const open = text.indexOf("<think>");
  if (open < 0) return null;
  for (
    let close = text.indexOf("</think>", open + 7);
    close >= 0;
    close = text.indexOf("</think>", close + 1)
  ) {
    let at = close + 8;
    while (at < text.length && pyIsSpaceCode(text.charCodeAt(at))) at++;
    if (!text.startsWith("<answer>", at)) continue;
    const end = text.indexOf("</answer>", at + 8);
    return end < 0 ? null : [text.slice(open + 7, close), text.slice(at + 8, end)];
  }
  return null;
}

/** Python's `re.search(r"<answer>(.*?)</answer>", text, re.DOTALL)`, linear. */
export function searchAnswer(text: string): string | null {
  const open = text.indexOf("<answer>");
  if (open < 0) return null;
  const end = text.indexOf("</answer>", open + 8);
  return end < 0 ? null : text.slice(open + 8, end);
}

function removeSpecialStrings(s: string): string {
  let out = s;
  for (const special of SPECIAL_STRINGS) out = pyStrip(out.replaceAll(special, ""));
  return out;
}

/**
 * Parse one model turn exactly as RAGEN does. `text` is the opening tag the generation
 * prompt supplied ("<think>" or "<answer>") followed by the generated text.
 */
export function parseResponse(text: string, opts: ParseOptions): ParseResult {
  const actionSep = opts.actionSep ?? DEFAULT_ACTION_SEP;
  const maxActions = opts.maxActionsPerTurn ?? DEFAULT_MAX_ACTIONS_PER_TURN;
  if (typeof actionSep !== "string" || actionSep.length === 0) {
    // Python's str.split raises on an empty separator.
    throw new RangeError(`actionSep must be a non-empty string, got ${JSON.stringify(actionSep)}`);
  }
  if (!Number.isInteger(maxActions) || maxActions < 0) {
    // Python slicing with a negative bound would drop actions from the end instead.
    throw new RangeError(`maxActionsPerTurn must be an integer >= 0, got ${String(maxActions)}`);
  }

  const found = opts.think ? searchThinkAnswer(text) : searchAnswer(text);
  if (found === null) return { parsed: [], llmResponse: text, matched: false };

  let [think, answer] = typeof found === "string" ? ["", found] : found;
  think = removeSpecialStrings(think);
  answer = removeSpecialStrings(answer);

  let parsed = answer
    .split(actionSep)
    .map(pyStrip)
    .filter((a) => a.length > 0);
  if (parsed.length > maxActions) {
    // Only a cut rebuilds the answer; otherwise it stays as written ("Up||Left").
    parsed = parsed.slice(0, maxActions);
    answer = parsed.join(` ${actionSep} `);
  }
  const llmResponse = opts.think
    ? `<think>${think}</think><answer>${answer}</answer>`
    : `<answer>${answer}</answer>`;
  return { parsed, llmResponse, matched: true };
}

/**
 * Map parsed action strings to env action ids: exact match after Python lower-casing
 * (no fuzzy matching), dropping unknown ones. `actionNames[i]` is action id i + 1.
 */
export function mapActions(parsed: readonly string[], actionNames: readonly string[]): MappedActions {
  const byName = new Map<string, number>();
  // Later names win on a lower-case collision, like RAGEN's dict comprehension.
  actionNames.forEach((name, i) => {
    byName.set(pyLower(name), i + 1);
  });
  const ids: number[] = [];
  for (const action of parsed) {
    const id = byName.get(pyLower(action));
    if (id !== undefined) ids.push(id);
  }
  return {
    ids,
    names: ids.map((id) => actionNames[id - 1]),
    formatPenalty: ids.length !== parsed.length || ids.length === 0,
  };
}
