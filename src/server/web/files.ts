// Episode files for Replay: the ones in the directory `rollgym serve --share DIR` names, and
// uploads held in memory. A shared file is found by listing DIR and matching the name, never by
// joining a client's string onto a path, so nothing outside DIR can be read; uploads are checked
// to be episode files and kept within a count and a byte budget, the oldest evicted first.
import { randomBytes } from "node:crypto";
import { constants, type Dirent, type ReadStream, type Stats } from "node:fs";
import { type FileHandle, lstat, open, readdir } from "node:fs/promises";
import { join } from "node:path";
import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads";
import { deeperThan, MAX_JSON_DEPTH } from "../../../protocol/bounded-json.ts";
import type { LimitValues } from "../../../protocol/settings.ts";
import { WaitQueue } from "../../concurrency/wait-queue.ts";
import { codeOf } from "../../errors/boundary.ts";
import { RollgymError } from "../../errors/catalogue.ts";
import { checkEpisodeText, EpisodeFileError } from "../../record/episode-reader.ts";
import { limitDefaults } from "../limits.ts";

/** Uploads' and shared files' limits (protocol/settings.ts LIMITS, part "files"), by option name. */
export type FileLimits = LimitValues<"files">;

export const DEFAULT_FILE_LIMITS: FileLimits = limitDefaults("files");

export interface SharedFile {
  name: string;
  bytes: number;
  modified: string;
}

/** Episode files directly in `dir`: regular `.jsonl` files (symbolic links are not followed). */
export async function listShared(dir: string, limits: FileLimits): Promise<SharedFile[]> {
  const files: (SharedFile & { mtime: number })[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const info = await sharedEntry(dir, entry);
    if (!info) continue;
    files.push({
      name: entry.name,
      bytes: info.size,
      modified: info.mtime.toISOString(),
      mtime: info.mtimeMs,
    });
  }
  files.sort((a, b) => b.mtime - a.mtime || a.name.localeCompare(b.name));
  return files.slice(0, limits.maxListed).map(({ mtime: _mtime, ...file }) => file);
}

/** A shareable entry's stats: a regular `.jsonl` file (no link, no folder), or null. */
async function sharedEntry(dir: string, entry: Dirent): Promise<Stats | null> {
  if (!entry.isFile() || !entry.name.endsWith(".jsonl")) return null;
  const info = await lstat(join(dir, entry.name)).catch(() => null);
  return info?.isFile() ? info : null;
}

/**
 * A stream of the shared file called `name`, if DIR lists it (found by listing, never by path).
 * Opened with O_NOFOLLOW and checked through the open descriptor, so a symbolic link swapped in
 * between the listing and the open is refused rather than followed.
 */
export async function openShared(dir: string, name: string, limits: FileLimits): Promise<ReadStream> {
  const entry = (await readdir(dir, { withFileTypes: true })).find((e) => e.name === name);
  const missing = () =>
    new RollgymError("not_found", { message: `no episode file ${JSON.stringify(name)} is shared` });
  if (!entry || !(await sharedEntry(dir, entry))) throw missing();
  let handle: FileHandle;
  try {
    handle = await open(
      join(dir, entry.name),
      constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK,
    );
  } catch {
    throw missing(); // ELOOP: a link now; ENOENT: gone
  }
  const info = await handle.stat();
  if (!info.isFile()) {
    await handle.close();
    throw missing();
  }
  if (info.size > limits.maxSharedBytes) {
    await handle.close();
    throw new RollgymError("too_large", {
      message: `${name} has ${info.size} bytes; at most ${limits.maxSharedBytes} are served`,
    });
  }
  return handle.createReadStream({ end: Math.max(0, info.size - 1) });
}

/** Checks `text` with the one episode-file reader; a problem is a 400 naming the line and field. */
function checkUpload(text: string): { episodes: number } {
  // Episode lines nest a few levels; JSON.parse of millions of nested brackets takes seconds.
  const deep = deeperThan(text, MAX_JSON_DEPTH, true);
  if (deep >= 0)
    throw new RollgymError("bad_request", {
      message: `line ${lineAt(text, deep)}: nested deeper than ${MAX_JSON_DEPTH} levels`,
    });
  try {
    return checkEpisodeText(text);
  } catch (error) {
    if (error instanceof EpisodeFileError)
      throw new RollgymError("bad_request", { message: error.message }, error.field);
    throw error;
  }
}

/** Uploads up to this size are parsed on the event loop (a few milliseconds at most). */
const OFF_LOOP_BYTES = 256 << 10;
/** Heap a checking worker may use: a hostile line of nested arrays costs far more than its bytes. */
export const CHECK_HEAP_MIB = 384;
/** Checks running at once; more wait their turn (uploads being received are capped anyway). */
export const CHECKS_AT_ONCE = 2;
/** A check taking longer than this is stopped and the upload refused. */
const CHECK_TIMEOUT_MS = 30_000;

let checking = 0;
const waitingChecks = new WaitQueue();

/**
 * checkEpisodeText in a worker thread with its own bounded heap, so parsing a large upload
 * (JSON.parse of a 30 MB line takes seconds) never freezes the event loop, and a line built to
 * blow up the parser costs at most CHECK_HEAP_MIB and is refused.
 */
async function checkOffLoop(body: Buffer): Promise<{ episodes: number; bytes: Buffer }> {
  // A check that ends hands its place to the oldest waiting one, so none starts in between.
  if (checking < CHECKS_AT_ONCE) checking++;
  else await waitingChecks.park();
  try {
    // The bytes move to the worker and back (transferred, not copied: nothing on this thread
    // scales with the upload's size).
    const own =
      body.byteOffset === 0 && body.byteLength === body.buffer.byteLength ? body : Buffer.from(body);
    const buffer = own.buffer as ArrayBuffer;
    return await new Promise((resolve, reject) => {
      const worker = new Worker(new URL(import.meta.url), {
        workerData: { uploadCheck: buffer },
        transferList: [buffer],
        resourceLimits: { maxOldGenerationSizeMb: CHECK_HEAP_MIB, maxYoungGenerationSizeMb: 16 },
      });
      const timer = setTimeout(() => {
        reject(
          new RollgymError("too_large", {
            message: `the upload could not be checked within ${CHECK_TIMEOUT_MS / 1000} s`,
          }),
        );
        void worker.terminate();
      }, CHECK_TIMEOUT_MS);
      worker.once("exit", () => clearTimeout(timer));
      worker.once("message", (m: CheckAnswer) => {
        if (m.ok) resolve({ episodes: m.episodes, bytes: Buffer.from(m.bytes) });
        else reject(new RollgymError(m.code, { message: m.message }));
        void worker.terminate();
      });
      worker.once("error", (error) =>
        reject(
          new RollgymError("too_large", {
            message: `the upload could not be checked within ${CHECK_HEAP_MIB} MiB (${error.message}); split it or use the shared directory`,
          }),
        ),
      );
      worker.once("exit", () =>
        reject(new RollgymError("check_failed", { message: "the upload's check ended without an answer" })),
      );
    });
  } finally {
    if (waitingChecks.size > 0) waitingChecks.wakeNext();
    else checking--;
  }
}

type CheckAnswer =
  | { ok: true; episodes: number; bytes: ArrayBuffer }
  | { ok: false; code: "bad_request" | "too_large"; message: string };

// This module is also checkOffLoop's worker: it answers the check it was started with, and
// hands the bytes back.
if (!isMainThread && (workerData as { uploadCheck?: unknown } | null)?.uploadCheck instanceof ArrayBuffer) {
  const bytes = (workerData as { uploadCheck: ArrayBuffer }).uploadCheck;
  let answer: CheckAnswer;
  try {
    answer = { ok: true, ...checkUpload(Buffer.from(bytes).toString("utf8")), bytes };
  } catch (error) {
    const code = codeOf(error);
    answer =
      code === "too_large" || code === "bad_request"
        ? { ok: false, code, message: (error as Error).message }
        : { ok: false, code: "bad_request", message: String(error) };
  }
  parentPort?.postMessage(answer, answer.ok ? [bytes] : []);
}

/** Uploaded episode files, in memory only, under the count and byte limits. */
export class UploadStore {
  /** Kept as the bytes that arrived (served as they are; one byte per ASCII character). */
  private readonly files = new Map<string, Buffer>();
  private bytes = 0;
  private readonly limits: FileLimits;

  constructor(limits: FileLimits) {
    this.limits = limits;
  }

  /**
   * Check and keep `body`; returns its id (unguessable, so a shared URL is the only way in).
   * Large uploads are checked in a worker thread (checkOffLoop), small ones here.
   */
  async add(body: Buffer | string): Promise<{ id: string; episodes: number; bytes: number }> {
    let bytes = typeof body === "string" ? Buffer.from(body) : body;
    const size = bytes.byteLength;
    if (size > this.limits.maxUploadBytes)
      throw new RollgymError("too_large", {
        message: `the upload has ${size} bytes; at most ${this.limits.maxUploadBytes} are accepted`,
      });
    let episodes: number;
    if (size <= OFF_LOOP_BYTES) ({ episodes } = checkUpload(bytes.toString("utf8")));
    else ({ episodes, bytes } = await checkOffLoop(bytes));
    while (
      this.files.size > 0 &&
      (this.files.size >= this.limits.maxUploads || this.bytes + size > this.limits.maxUploadTotalBytes)
    ) {
      const [oldest, kept] = this.files.entries().next().value!;
      this.files.delete(oldest);
      this.bytes -= kept.byteLength;
    }
    const id = randomBytes(16).toString("hex");
    this.files.set(id, bytes);
    this.bytes += size;
    return { id, episodes, bytes: size };
  }

  get(id: string): Buffer | undefined {
    return this.files.get(id);
  }
}

/** The line (1-based) of `text` that `offset` is on. */
function lineAt(text: string, offset: number): number {
  let line = 1;
  for (let i = text.indexOf("\n"); i >= 0 && i < offset; i = text.indexOf("\n", i + 1)) line++;
  return line;
}
