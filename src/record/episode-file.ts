// Episode files: JSON lines holding every turn of every episode of a rollout, read by replay
// and the web page. Lines: one header, one line per episode (by env id), one per group, one
// summary. This module writes them and reads them from disk; episode-reader.ts checks them. Nothing time-dependent is written unless the caller adds it, so the same seed and
// a deterministic policy give a byte-identical file.

import { createReadStream } from "node:fs";
import { type FileHandle, open } from "node:fs/promises";
import { createInterface } from "node:readline";
import {
  EPISODE_FILE_FORMAT,
  EPISODE_FILE_VERSION,
  type EpisodeFile,
  type EpisodeFileHeader,
  EpisodeFileReader,
  type EpisodeFileSummary,
} from "./episode-reader.ts";
import type { BatchResult } from "./episode-record.ts";

export {
  EPISODE_FILE_FORMAT,
  EPISODE_FILE_VERSION,
  type EpisodeFile,
  EpisodeFileError,
  type EpisodeFileHeader,
  type EpisodeFileSummary,
} from "./episode-reader.ts";

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

/** An episode file from disk, streamed line by line through the one reader (episode-reader.ts). */
export async function readEpisodeFile(path: string): Promise<EpisodeFile> {
  const reader = new EpisodeFileReader(path);
  for await (const line of createInterface({ input: createReadStream(path, "utf8"), crlfDelay: Infinity }))
    reader.line(line);
  return reader.finish();
}
