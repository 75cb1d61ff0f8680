// An episode's chat history as JSON text, serialised once and extended turn after turn: each
// turn's prompt repeats the one before it and adds a few messages, so only the new ones are
// serialised. A prompt that does not extend the last one (a window slid, turns were dropped)
// is served from the longest prefix they share.
import type { ChatMessage } from "./chat.ts";

/**
 * The JSON of the latest system prompts, shared by the episodes that start with one: a
 * system prompt is one string per tag (rollout/prompt.ts), and without this each episode would
 * hold its own serialisation of it (1.7 KiB for Sokoban, at 10,240 in flight 17 MiB).
 */
const SYSTEM_PROMPTS_KEPT = 64;
const systemJson = new Map<string, string>();

function systemMessageJson(message: ChatMessage): string {
  let json = systemJson.get(message.content);
  if (json === undefined) {
    json = JSON.stringify(message);
    if (systemJson.size >= SYSTEM_PROMPTS_KEPT) systemJson.delete(systemJson.keys().next().value as string);
    systemJson.set(message.content, json);
  }
  return json;
}

export class HistoryJson {
  /** The role and content of each message serialised last (the episode's own strings). */
  #roles: string[] = [];
  #contents: string[] = [];
  /** Those messages' JSON, joined with commas, and where each one ends in it. */
  #joined = "";
  #ends: number[] = [];

  /**
   * The JSON array elements of `messages` (what goes between "[" and "]"), the same text as
   * JSON.stringify(messages) has there. A message is matched on its role and content, the
   * only fields a ChatMessage has.
   */
  elements(messages: readonly ChatMessage[]): string {
    const known = Math.min(messages.length, this.#ends.length);
    let same = 0;
    while (
      same < known &&
      messages[same].role === this.#roles[same] &&
      messages[same].content === this.#contents[same]
    )
      same++;
    if (same < this.#ends.length) {
      this.#joined = same === 0 ? "" : this.#joined.slice(0, this.#ends[same - 1]);
      this.#roles.length = same;
      this.#contents.length = same;
      this.#ends.length = same;
    }
    let joined = this.#joined;
    for (let i = same; i < messages.length; i++) {
      const message = messages[i];
      const part =
        i === 0 && message.role === "system" ? systemMessageJson(message) : JSON.stringify(message);
      joined = i === 0 ? part : `${joined},${part}`;
      this.#roles.push(message.role);
      this.#contents.push(message.content);
      this.#ends.push(joined.length);
    }
    this.#joined = joined;
    return joined;
  }
}
