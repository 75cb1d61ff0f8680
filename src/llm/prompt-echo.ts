// vLLM's completions answer echoes the prompt's ids (prompt_token_ids), which token mode checks
// against the log it sent. The echo is most of the answer's bytes; where it is the very JSON
// text of the prompt sent, the answer is read without it and the echo taken as the ids sent:
// the same value JSON.parse would give, without decoding, parsing and allocating every id
// again. Of the logprobs, token mode reads token_logprobs only: each token's text, offset and
// top-k map (a string and an object per token) are not decoded or built either.
import { randomUUID } from "node:crypto";
import { parseBody } from "./http.ts";

const ECHO_KEY = Buffer.from('"prompt_token_ids":');
/** Stands in for the echo while the rest is parsed: no engine can send it (a per-process nonce). */
const STAND_IN = `rollgym-echo-${randomUUID()}`;
const STAND_IN_JSON = Buffer.from(`"${STAND_IN}"`);
/** The logprobs fields left unread, each parsed as 0 (an engine never sends 0 there). */
const UNREAD_LOGPROBS = ["text_offset", "tokens", "top_logprobs"] as const;
const UNREAD_KEYS = UNREAD_LOGPROBS.map((name) => Buffer.from(`"${name}":`));
const ZERO = Buffer.from("0");

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/** A value of the answer replaced before parsing: the echo, or an unread field (`name`). */
interface Cut {
  from: number;
  to: number;
  with: Buffer;
  name?: (typeof UNREAD_LOGPROBS)[number];
}

/**
 * JSON.parse of `body`, a completions answer to a request whose prompt was `ids`, sent as
 * `json` (JSON.stringify(ids)), but for the first choice's unread logprobs fields, which read
 * as 0 when they were found; undefined when it is not JSON. When the answer holds the echo key
 * once, not escaped, followed by exactly `json`, that value is read as `ids` itself.
 */
export function parseEchoing(body: Buffer, json: string, ids: readonly number[]): unknown {
  const at = uniqueKey(body, ECHO_KEY);
  if (at < 0 || !holds(body, at, json)) return parseBody(body.toString("utf8"));
  const cuts: Cut[] = [{ from: at, to: at + json.length, with: STAND_IN_JSON }];
  UNREAD_LOGPROBS.forEach((name, k) => {
    const value = uniqueKey(body, UNREAD_KEYS[k]);
    const end = value < 0 ? -1 : valueEnd(body, value);
    if (end < 0) return;
    // In the answer's order (vLLM writes the logprobs before the echo), kept without a sort.
    let i = cuts.length;
    while (i > 0 && cuts[i - 1].from > value) i--;
    cuts.splice(i, 0, { from: value, to: end, with: ZERO, name });
  });
  const pieces: Buffer[] = [];
  let from = 0;
  for (const cut of cuts) {
    if (cut.from < from) return parseBody(body.toString("utf8"));
    pieces.push(body.subarray(from, cut.from), cut.with);
    from = cut.to;
  }
  pieces.push(body.subarray(from));
  // Cut at ASCII punctuation, so no UTF-8 character is split.
  const parsed = parseBody(Buffer.concat(pieces).toString("utf8")) as {
    choices?: { prompt_token_ids?: unknown; logprobs?: Record<string, unknown> | null }[];
  };
  const choice = parsed?.choices?.[0];
  // Elsewhere than in the first choice, a stand-in is not read: the answer is parsed whole.
  if (choice?.prompt_token_ids !== STAND_IN) return parseBody(body.toString("utf8"));
  for (const { name } of cuts)
    if (name !== undefined && choice.logprobs?.[name] !== 0) return parseBody(body.toString("utf8"));
  choice.prompt_token_ids = ids;
  return parsed;
}

/** Where the value of `key` (a quoted name and its colon) starts, when the key is found once and not escaped; else -1. */
function uniqueKey(body: Buffer, key: Buffer): number {
  const found = body.indexOf(key);
  if (found <= 0 || body[found - 1] === BACKSLASH || body.indexOf(key, found + key.length) >= 0) return -1;
  return found + key.length;
}

/** Whether `body` holds the ASCII text `json` at `at`. */
function holds(body: Buffer, at: number, json: string): boolean {
  if (at + json.length > body.length) return false;
  for (let i = 0; i < json.length; i++) if (body[at + i] !== json.charCodeAt(i)) return false;
  return true;
}

/** Where the JSON value starting at `at` ends (exclusive), read only as far as nesting and strings; -1 when it does not. */
function valueEnd(body: Buffer, at: number): number {
  let depth = 0;
  for (let i = at; i < body.length; i++) {
    const c = body[i];
    if (c === QUOTE) {
      for (i++; i < body.length && body[i] !== QUOTE; i++) if (body[i] === BACKSLASH) i++;
      if (depth === 0) return i + 1;
    } else if (c === 0x5b || c === 0x7b) depth++;
    else if (depth === 0 && (c === 0x2c || c === 0x5d || c === 0x7d)) return i === at ? -1 : i;
    else if ((c === 0x5d || c === 0x7d) && --depth === 0) return i + 1;
  }
  return -1;
}
