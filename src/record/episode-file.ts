// Episode files: JSON lines holding every turn of every episode of a rollout, read by replay
// and the web page. Lines: one header, one line per episode (by env id), one per group, one
// summary. Nothing time-dependent is written unless the caller adds it, so the same seed and
// a deterministic policy give a byte-identical file.

import { once } from "node:events";
import { createReadStream, createWriteStream } from "node:fs";
import { createInterface } from "node:readline";
import type { BatchResult, GroupResult } from "../rollout/batch.ts";
import type { EpisodeRecord } from "../rollout/episode.ts";

export const EPISODE_FILE_FORMAT = "rollgym.episodes";
export const EPISODE_FILE_VERSION = 1;

export interface EpisodeFileHeader {
  type: "header";
  format: typeof EPISODE_FILE_FORMAT;
  version: number;
  mode: string;
  seed: number;
  group_size: number;
  tags: { tag: string; groups: number }[];
  policy: string;
  /** The settings the rollout ran with (context mode, turns, sampling, filter …). */
  settings: Record<string, unknown>;
  /** Wall-clock facts, only with --timings. */
  timings?: Record<string, number | string>;
}

export interface EpisodeFileSummary {
  type: "summary";
  episodes: number;
  failed: number;
  kept_groups: number[];
  metrics: Record<string, number>;
}

export interface EpisodeFile {
  header: EpisodeFileHeader;
  episodes: EpisodeRecord[];
  groups: GroupResult[];
  summary: EpisodeFileSummary;
}

export class EpisodeFileError extends Error {
  constructor(path: string, line: number, message: string) {
    super(`${path}:${line}: ${message}`);
    this.name = "EpisodeFileError";
  }
}

export async function writeEpisodeFile(
  path: string,
  header: Omit<EpisodeFileHeader, "type" | "format" | "version">,
  batch: BatchResult,
): Promise<void> {
  const out = createWriteStream(path);
  const write = async (value: unknown) => {
    if (!out.write(`${JSON.stringify(value)}\n`)) await once(out, "drain");
  };
  await write({ type: "header", format: EPISODE_FILE_FORMAT, version: EPISODE_FILE_VERSION, ...header });
  for (const episode of [...batch.episodes].sort((a, b) => a.env_id - b.env_id))
    await write({ type: "episode", ...episode });
  for (const group of batch.groups) await write({ type: "group", ...group });
  const summary: EpisodeFileSummary = {
    type: "summary",
    episodes: batch.episodes.length,
    failed: batch.failed,
    kept_groups: batch.groups.filter((g) => g.kept).map((g) => g.group_id),
    metrics: batch.metrics,
  };
  await write(summary);
  out.end();
  await once(out, "finish");
}

export async function readEpisodeFile(path: string): Promise<EpisodeFile> {
  const lines = createInterface({ input: createReadStream(path, "utf8"), crlfDelay: Infinity });
  let header: EpisodeFileHeader | null = null;
  let summary: EpisodeFileSummary | null = null;
  const episodes: EpisodeRecord[] = [];
  const groups: GroupResult[] = [];
  let n = 0;
  for await (const line of lines) {
    n++;
    if (line.trim() === "") continue;
    let value: { type?: string } & Record<string, unknown>;
    try {
      value = JSON.parse(line);
    } catch {
      throw new EpisodeFileError(path, n, "not a JSON line");
    }
    const { type, ...rest } = value;
    if (n === 1) {
      if (type !== "header" || value.format !== EPISODE_FILE_FORMAT) {
        throw new EpisodeFileError(
          path,
          n,
          `not a rollgym episode file (first line must be a ${EPISODE_FILE_FORMAT} header)`,
        );
      }
      if (value.version !== EPISODE_FILE_VERSION) {
        throw new EpisodeFileError(
          path,
          n,
          `version ${value.version} is not supported (this rollgym reads ${EPISODE_FILE_VERSION})`,
        );
      }
      header = value as unknown as EpisodeFileHeader;
    } else if (type === "episode") episodes.push(rest as unknown as EpisodeRecord);
    else if (type === "group") groups.push(rest as unknown as GroupResult);
    else if (type === "summary") summary = value as unknown as EpisodeFileSummary;
    else throw new EpisodeFileError(path, n, `unknown line type ${JSON.stringify(type)}`);
  }
  if (!header) throw new EpisodeFileError(path, 1, "empty file");
  if (!summary) throw new EpisodeFileError(path, n, "no summary line (was the file cut short?)");
  return { header, episodes, groups, summary };
}
