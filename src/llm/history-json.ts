// An episode's chat history as JSON text, serialised once and extended turn after turn: each
// turn's prompt repeats the one before it and adds a few messages, so only the new ones are
// serialised. A prompt that does not extend the last one (a window slid, turns were dropped)
// is served from the longest prefix they share. Its UTF-8 byte length is kept beside the text,
// counted on each piece as it is serialised: the request's Content-Length then needs no pass
// over the whole body (which would flatten it into a copy first).
import type { ChatMessage } from "./chat.ts";
import { utf8Length } from "./http.ts";

/**
 * The JSON of the latest system prompts, shared by the episodes that start with one: a
 * system prompt is one string per tag (rollout/prompt.ts), and without this each episode would
 * hold its own serialisation of it (1.7 KiB for Sokoban, at 10,240 in flight 17 MiB).
 */
const SYSTEM_PROMPTS_KEPT = 64;
const systemJson = new Map<string, JsonPiece>();

/** A piece of JSON text and its UTF-8 byte length. */
interface JsonPiece {
  readonly json: string;
  readonly bytes: number;
}

function systemMessageJson(message: ChatMessage): JsonPiece {
  let piece = systemJson.get(message.content);
  if (piece === undefined) {
    piece = jsonPiece(message);
    if (systemJson.size >= SYSTEM_PROMPTS_KEPT) systemJson.delete(systemJson.keys().next().value as string);
    systemJson.set(message.content, piece);
  }
  return piece;
}

/**
 * A message's JSON and its byte length. Lengths of JSON texts add up: JSON.stringify escapes
 * lone surrogates, so no surrogate pair is ever split between two pieces.
 */
function jsonPiece(message: ChatMessage): JsonPiece {
  const json = JSON.stringify(message);
  return { json, bytes: utf8Length(json) };
}

export class HistoryJson {
  /** The role and content of each message serialised last (the episode's own strings). */
  #roles: string[] = [];
  #contents: string[] = [];
  /** Those messages' JSON, joined with commas, and where each one ends in it. */
  #joined = "";
  #ends: number[] = [];
  /** The UTF-8 bytes up to the end of each of those messages. */
  #byteEnds: number[] = [];
  #bytes = 0;

  /** The UTF-8 byte length of the text elements() returned last. */
  get bytes(): number {
    return this.#bytes;
  }

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
      this.#bytes = same === 0 ? 0 : this.#byteEnds[same - 1];
      this.#roles.length = same;
      this.#contents.length = same;
      this.#ends.length = same;
      this.#byteEnds.length = same;
    }
    let joined = this.#joined;
    let bytes = this.#bytes;
    for (let i = same; i < messages.length; i++) {
      const message = messages[i];
      const part = i === 0 && message.role === "system" ? systemMessageJson(message) : jsonPiece(message);
      joined = i === 0 ? part.json : `${joined},${part.json}`;
      bytes = i === 0 ? part.bytes : bytes + 1 + part.bytes;
      this.#roles.push(message.role);
      this.#contents.push(message.content);
      this.#ends.push(joined.length);
      this.#byteEnds.push(bytes);
    }
    this.#joined = joined;
    this.#bytes = bytes;
    return joined;
  }
}
