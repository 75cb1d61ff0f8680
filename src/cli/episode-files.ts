// Reading an episode file (rollout --out) for a command: problems with the file, and ids the
// file does not have, are one-line usage errors.
import { codeOf, inContext } from "../errors/boundary.ts";
import { type EpisodeFile, readEpisodeFile } from "../record/episode-file.ts";
import { parseInteger, UsageError } from "./args.ts";

export async function readEpisodeFileOrExplain(command: string, path: string): Promise<EpisodeFile> {
  try {
    return await readEpisodeFile(path);
  } catch (error) {
    // The file's own problems go on to the boundary (exit 2), with the command's name.
    if (codeOf(error) !== null) throw inContext(error, "episode_file", command);
    const code = (error as NodeJS.ErrnoException).code;
    if (code) {
      throw new UsageError(
        `${command}: cannot read ${JSON.stringify(path)}: ${code}; allowed: an episode file written by rollout --out`,
      );
    }
    throw error;
  }
}

/** A comma-separated list of ids, each one of `known` (group ids, env ids …). */
export function parseIdList(
  flag: string,
  text: string,
  known: ReadonlySet<number>,
  what: string,
): Set<number> {
  const wanted = text.split(",").map((t) => parseInteger(flag, t.trim(), 0, Number.MAX_SAFE_INTEGER));
  const missing = wanted.find((id) => !known.has(id));
  if (missing !== undefined) {
    const sorted = [...known].sort((a, b) => a - b);
    const range = sorted.length ? `${sorted[0]}..${sorted[sorted.length - 1]}` : "none";
    throw new UsageError(`${flag}: no ${what} ${missing} in this file; allowed: ${range}`);
  }
  return new Set(wanted);
}
