// Version stamps checked from the engine's side: the mock engine records which loaded weights
// made each token of each request (GET /mock/generations); these helpers find, for a token
// log, the requests that produced each turn and read their versions.
import type { GenerationRecord } from "../../src/mock-engine/server.ts";

/** The ordinal of one of the mock's loaded-weights names: it starts with "default", tests load "step-N". */
export function ordinalOf(name: string): number {
  if (name === "default") return 0;
  const n = /^step-(\d+)$/.exec(name)?.[1];
  if (n === undefined) throw new Error(`the tests load weights named step-N, not ${JSON.stringify(name)}`);
  return Number(n);
}

/** Whether `r`'s prompt is exactly the first ids of the log. */
function promptOfLog(r: GenerationRecord, ids: readonly number[]): boolean {
  return r.prompt_ids.length <= ids.length && r.prompt_ids.every((id, i) => id === ids[i]);
}

/**
 * The engine's version of each id in ids[from, to), from `records`, one episode's requests
 * (its session). At each position, of the requests whose prompt is the log so far, the one whose
 * output agrees with the log furthest made the ids, up to the prompt end of another request of
 * the log (where an interrupted request's kept ids end: it may have made more than the client
 * kept, and the mock answers alike whatever its weights, so what it made past that point can
 * agree with the continuation by chance). Of requests agreeing equally far, the one that began
 * last. Not simply the last to begin: a request the client gave up (an update interrupted it)
 * can begin decoding after its successor at the same prompt did, when the engine notices the
 * closed connection only at its first token.
 */
export function engineVersions(
  records: readonly GenerationRecord[],
  ids: readonly number[],
  from: number,
  to: number,
): number[] {
  const out: number[] = [];
  let at = from;
  while (at < to) {
    let index = -1;
    let agreed = 0;
    records.forEach((r, i) => {
      if (r.prompt_ids.length !== at || !promptOfLog(r, ids)) return;
      let n = 0;
      while (n < r.choices[0].length && at + n < to && r.choices[0][n] === ids[at + n]) n++;
      n = cutAt(records, ids, at, n);
      if (n > agreed || (n > 0 && n === agreed && r.started > records[index].started)) {
        index = i;
        agreed = n;
      }
    });
    if (index < 0) throw new Error(`no engine request continues the log at position ${at}`);
    for (let i = 0; i < agreed; i++) out.push(ordinalOf(records[index].versions[i]));
    at += agreed;
  }
  return out;
}

/** `agreed` ids from `at`, cut where any request of the log starts inside them, whenever it began or ended. */
function cutAt(
  records: readonly GenerationRecord[],
  ids: readonly number[],
  at: number,
  agreed: number,
): number {
  for (const later of records) {
    const end = later.prompt_ids.length;
    if (end > at && end < at + agreed && promptOfLog(later, ids)) agreed = end - at;
  }
  return agreed;
}
