// vLLM's completions answer echoes the prompt's ids (prompt_token_ids), which token mode checks
// against the log it sent. The echo is most of the answer's bytes; where it is the very JSON
// text of the prompt sent, the answer is parsed without it and the echo read as the ids sent:
// the same value JSON.parse would give, without parsing and allocating every id again.
import { randomUUID } from "node:crypto";
import { parseBody } from "./http.ts";

const ECHO_KEY = '"prompt_token_ids":';
/** Stands in for the echo while the rest is parsed: no engine can send it (a per-process nonce). */
const STAND_IN = `rollgym-echo-${randomUUID()}`;

/**
 * JSON.parse(text) for a completions answer to a request whose prompt was `ids`, sent as
 * `json` (JSON.stringify(ids)); undefined when `text` is not JSON. When the answer holds the
 * key once, not escaped, followed by exactly `json`, that value is read as `ids` itself.
 */
export function parseEchoing(text: string, json: string, ids: readonly number[]): unknown {
  const key = text.indexOf(ECHO_KEY);
  const at = key + ECHO_KEY.length;
  if (key <= 0 || text[key - 1] === "\\" || text.indexOf(ECHO_KEY, at) >= 0 || !text.startsWith(json, at))
    return parseBody(text);
  const parsed = parseBody(`${text.slice(0, at)}"${STAND_IN}"${text.slice(at + json.length)}`) as {
    choices?: { prompt_token_ids?: unknown }[];
  };
  const choice = parsed?.choices?.[0];
  // Elsewhere than in the first choice, the stand-in is not read: the answer is parsed whole.
  if (choice?.prompt_token_ids !== STAND_IN) return parseBody(text);
  choice.prompt_token_ids = ids;
  return parsed;
}
