// vLLM's completions answer echoes the prompt's ids (prompt_token_ids), which token mode checks
// against the log it sent. The echo is most of the answer's bytes; where it is the very JSON
// text of the prompt sent, the answer is parsed without it and the echo read as the ids sent:
// the same value JSON.parse would give, without parsing and allocating every id again. Of the
// logprobs, token mode reads token_logprobs only: each token's text, offset and top-k map (a
// string and an object per token) are not built either.
import { randomUUID } from "node:crypto";
import { parseBody } from "./http.ts";

const ECHO_KEY = '"prompt_token_ids":';
/** Stands in for the echo while the rest is parsed: no engine can send it (a per-process nonce). */
const STAND_IN = `rollgym-echo-${randomUUID()}`;
/** The logprobs fields left unread, each parsed as 0 (an engine never sends 0 there). */
const UNREAD_LOGPROBS = ["text_offset", "tokens", "top_logprobs"] as const;

/** A value of the answer's text replaced before parsing: the echo, or an unread field (`name`). */
interface Cut {
  from: number;
  to: number;
  with: string;
  name?: (typeof UNREAD_LOGPROBS)[number];
}

/**
 * JSON.parse(text) for a completions answer to a request whose prompt was `ids`, sent as
 * `json` (JSON.stringify(ids)), but for the first choice's unread logprobs fields, which read
 * as 0 when they were found; undefined when `text` is not JSON. When the answer holds the echo
 * key once, not escaped, followed by exactly `json`, that value is read as `ids` itself.
 */
export function parseEchoing(text: string, json: string, ids: readonly number[]): unknown {
  const key = uniqueKey(text, ECHO_KEY);
  if (key < 0 || !text.startsWith(json, key)) return parseBody(text);
  const cuts: Cut[] = [{ from: key, to: key + json.length, with: `"${STAND_IN}"` }];
  for (const name of UNREAD_LOGPROBS) {
    const at = uniqueKey(text, `"${name}":`);
    const end = at < 0 ? -1 : valueEnd(text, at);
    if (end > 0) cuts.push({ from: at, to: end, with: "0", name });
  }
  cuts.sort((a, b) => a.from - b.from);
  let kept = "";
  let from = 0;
  for (const cut of cuts) {
    if (cut.from < from) return parseBody(text);
    kept += text.slice(from, cut.from) + cut.with;
    from = cut.to;
  }
  const parsed = parseBody(kept + text.slice(from)) as {
    choices?: { prompt_token_ids?: unknown; logprobs?: Record<string, unknown> | null }[];
  };
  const choice = parsed?.choices?.[0];
  // Elsewhere than in the first choice, a stand-in is not read: the answer is parsed whole.
  if (choice?.prompt_token_ids !== STAND_IN) return parseBody(text);
  for (const { name } of cuts)
    if (name !== undefined && choice.logprobs?.[name] !== 0) return parseBody(text);
  choice.prompt_token_ids = ids;
  return parsed;
}

/** Where the value of `key` (a quoted name and its colon) starts, when the key is found once and not escaped; else -1. */
function uniqueKey(text: string, key: string): number {
  const found = text.indexOf(key);
  if (found <= 0 || text[found - 1] === "\\" || text.indexOf(key, found + key.length) >= 0) return -1;
  return found + key.length;
}

/** Where the JSON value starting at `at` ends (exclusive), read only as far as nesting and strings; -1 when it does not. */
function valueEnd(text: string, at: number): number {
  let depth = 0;
  for (let i = at; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      for (i++; i < text.length && text.charCodeAt(i) !== 0x22; i++) if (text.charCodeAt(i) === 0x5c) i++;
      if (depth === 0) return i + 1;
    } else if (c === 0x5b || c === 0x7b) depth++;
    else if (depth === 0 && (c === 0x2c || c === 0x5d || c === 0x7d)) return i === at ? -1 : i;
    else if ((c === 0x5d || c === 0x7d) && --depth === 0) return i + 1;
  }
  return -1;
}
