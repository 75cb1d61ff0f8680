// RAGEN's hard truncation of an over-long chat (ContextManager._apply_max_length): keep the
// first message, drop the oldest turns until the token count fits max_model_len. Reproduced
// for `truncation=ragen`, defects included; docs/ragen-divergences.md explains them.
import type { ChatMessage } from "../llm/chat.ts";

export interface RagenTruncation {
  /** The first message followed by the kept tail of the rest (the input itself when it fits). */
  messages: ChatMessage[];
  /** Assistant messages removed, i.e. earlier model turns whose response is no longer shown. */
  droppedTurns: number;
}

/**
 * Drops the oldest turns of `messages` the way RAGEN does until `count` is at most
 * `maxModelLen`:
 *
 * - nothing changes when the whole list fits;
 * - otherwise `messages[0]` (the system prompt) is always kept and the rest is cut from the
 *   front, one unit at a time, re-counting after each cut:
 *   user + assistant + a user message whose content contains "Reward" (so the dropped user
 *   message also carries the *next* turn's state), else user + assistant, else one message;
 * - cutting stops once the count fits or at most two messages are left after the first, so
 *   the result may still be too long (RAGEN only logs a warning), and a last unit of three
 *   can remove the current turn's own state, leaving the system prompt alone.
 *
 * `count` must return the token count RAGEN compares: the chat template applied to the
 * messages, tokenized without added special tokens. For an inference prompt that is the
 * template *with* the generation prompt ("<|im_start|>assistant\n" for Qwen) but *without*
 * the "<think>"/"<answer>" prefill RAGEN appends afterwards; for a training sequence, without
 * the generation prompt. The response budget is not counted either: RAGEN compares the
 * prompt alone with max_model_len.
 */
export async function ragenTruncate(
  messages: readonly ChatMessage[],
  count: (messages: readonly ChatMessage[]) => number | Promise<number>,
  maxModelLen: number,
): Promise<RagenTruncation> {
  if (messages.length === 0) return { messages: [], droppedTurns: 0 };
  let tokens = await count(messages);
  if (tokens <= maxModelLen) return { messages: [...messages], droppedTurns: 0 };

  const [first, ...rest] = messages;
  let start = 0;
  let droppedTurns = 0;
  while (tokens > maxModelLen && rest.length - start > 2) {
    const cut = oldestUnit(rest, start);
    for (let i = start; i < start + cut; i++) if (rest[i].role === "assistant") droppedTurns++;
    start += cut;
    tokens = await count([first, ...rest.slice(start)]);
  }
  return { messages: [first, ...rest.slice(start)], droppedTurns };
}

/** Size of the unit RAGEN removes at `start`; at least three messages remain from there. */
function oldestUnit(rest: readonly ChatMessage[], start: number): 1 | 2 | 3 {
  const [a, b, c] = [rest[start], rest[start + 1], rest[start + 2]];
  if (a.role !== "user" || b.role !== "assistant") return 1;
  return c.role === "user" && c.content.includes("Reward") ? 3 : 2;
}
