// Episode files: JSON lines holding every turn of every episode of a rollout, read by replay
// and the web page. Lines: one header, one line per episode (by env id), one per group, one
// summary. Nothing time-dependent is written unless the caller adds it, so the same seed and
// a deterministic policy give a byte-identical file.

import { createReadStream } from "node:fs";
import { type FileHandle, open } from "node:fs/promises";
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
  /** Set when a signal stopped the rollout: only the episodes that finished are in the file. */
  interrupted?: string;
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

export interface EpisodeFileSummaryExtra {
  /** The signal that stopped the rollout early; the file then holds the episodes that finished. */
  interrupted?: string;
}

/**
 * An episode file opened before the rollout starts, so a path that cannot be written fails
 * before any work is done; `write` fills it once the batch is over (or was interrupted).
 */
export class EpisodeFileWriter {
  readonly path: string;
  private readonly handle: FileHandle;

  private constructor(path: string, handle: FileHandle) {
    this.path = path;
    this.handle = handle;
  }

  /**
   * Creates the file; rejects with the system error (ENOENT, EISDIR, EACCES …). A regular file
   * that has content is refused with EEXIST unless `replace`: a re-run must not wipe a run.
   */
  static async open(path: string, { replace = false } = {}): Promise<EpisodeFileWriter> {
    if (replace) return new EpisodeFileWriter(path, await open(path, "w"));
    // "r+" opens only what exists (an empty file, a device) without truncating; else create.
    const handle = await open(path, "r+").catch((error: NodeJS.ErrnoException) => {
      if (error.code === "ENOENT") return open(path, "wx");
      throw error;
    });
    const info = await handle.stat();
    if (info.isFile() && info.size > 0) {
      await handle.close();
      throw Object.assign(new Error(`EEXIST: ${path} already has content`), { code: "EEXIST" });
    }
    return new EpisodeFileWriter(path, handle);
  }

  async write(
    header: Omit<EpisodeFileHeader, "type" | "format" | "version">,
    batch: BatchResult,
    extra: EpisodeFileSummaryExtra = {},
  ): Promise<void> {
    let chunk = "";
    const put = async (value: unknown, last = false): Promise<void> => {
      chunk += `${JSON.stringify(value)}\n`;
      if (chunk.length >= 1 << 16 || last) {
        await this.handle.write(chunk);
        chunk = "";
      }
    };
    try {
      await put({ type: "header", format: EPISODE_FILE_FORMAT, version: EPISODE_FILE_VERSION, ...header });
      for (const episode of [...batch.episodes].sort((a, b) => a.env_id - b.env_id))
        await put({ type: "episode", ...episode });
      for (const group of batch.groups) await put({ type: "group", ...group });
      const summary: EpisodeFileSummary = {
        type: "summary",
        episodes: batch.episodes.length,
        failed: batch.failed,
        kept_groups: batch.groups.filter((g) => g.kept).map((g) => g.group_id),
        metrics: batch.metrics,
        ...extra,
      };
      await put(summary, true);
    } finally {
      await this.handle.close();
    }
  }

  /** Gives up without writing (the file stays empty). */
  async close(): Promise<void> {
    await this.handle.close();
  }
}

export async function writeEpisodeFile(
  path: string,
  header: Omit<EpisodeFileHeader, "type" | "format" | "version">,
  batch: BatchResult,
  extra: EpisodeFileSummaryExtra = {},
): Promise<void> {
  await (await EpisodeFileWriter.open(path, { replace: true })).write(header, batch, extra);
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
    if (typeof value !== "object" || value === null || Array.isArray(value)) {
      throw new EpisodeFileError(path, n, "not a JSON object");
    }
    const { type, ...rest } = value;
    if (header === null) {
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
    } else if (type === "episode") {
      const why = episodeProblem(rest);
      if (why) throw new EpisodeFileError(path, n, `not an episode record: ${why}`);
      episodes.push(rest as unknown as EpisodeRecord);
    } else if (type === "group") groups.push(rest as unknown as GroupResult);
    else if (type === "summary") summary = value as unknown as EpisodeFileSummary;
    else throw new EpisodeFileError(path, n, `unknown line type ${JSON.stringify(type)}`);
  }
  if (!header) throw new EpisodeFileError(path, 1, "empty file");
  if (!summary) throw new EpisodeFileError(path, n, "no summary line (was the file cut short?)");
  return { header, episodes, groups, summary };
}

/** What makes a line unusable as an episode record (the fields readers rely on), or null. */
function episodeProblem(record: Record<string, unknown>): string | null {
  for (const key of ["env_id", "group_id", "seed", "reward", "score"])
    if (typeof record[key] !== "number") return `${key} is not a number`;
  for (const key of ["tag", "final_state"]) if (typeof record[key] !== "string") return `${key} is not text`;
  if (!Array.isArray(record.turns)) return "turns is not a list";
  const bad = record.turns.findIndex(
    (t) => typeof t !== "object" || t === null || typeof (t as { state?: unknown }).state !== "string",
  );
  return bad < 0 ? null : `turn ${bad} has no state`;
}
