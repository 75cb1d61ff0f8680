// Gives memory back after large releases (docs/server.md "Memory over time"). When sessions
// give back much of the memory budget at once (an env session full of 900 kB turns closed, a
// big batch acknowledged), V8 keeps the pages that held it in its pool, resident, and empties
// the pool only in a memory-reducing GC, which it runs when the process is idle: on a busy
// server, never. So the server's RSS would stay at its highest peak. After releases adding up
// to RETURN_AFTER_BYTES, one memory-reducing GC is run (at most one per RETURN_EVERY_MS), so
// RSS follows what is held instead.
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";

/** Bytes given back to the memory budget after which a memory-reducing GC runs. */
export const RETURN_AFTER_BYTES = 64 << 20;
/** At most one such GC in this time (each stops the event loop for tens of milliseconds). */
export const RETURN_EVERY_MS = 30_000;
/** Wait this long after the release that passed the mark: a session's release comes in parts. */
const SETTLE_MS = 1_000;

type GcFunction = (options: { type: "major"; execution: "sync"; flavor: "last-resort" }) => void;

let gcFunction: GcFunction | null | undefined;

/**
 * V8's gc() with options, taken from a fresh context once --expose-gc is set (setting it later
 * does not add gc to the contexts that already exist); null where that is not possible.
 */
function reducingGc(): GcFunction | null {
  if (gcFunction !== undefined) return gcFunction;
  try {
    setFlagsFromString("--expose-gc");
    const gc = runInNewContext("gc") as unknown;
    gcFunction = typeof gc === "function" ? (gc as GcFunction) : null;
  } catch {
    gcFunction = null;
  }
  return gcFunction;
}

export class MemoryReturn {
  private releasedBytes = 0;
  private lastRun = Number.NEGATIVE_INFINITY;
  private timer: NodeJS.Timeout | null = null;
  /** Memory-reducing GCs run, since the server started. */
  runs = 0;

  /** `bytes` were given back to the memory budget. */
  released(bytes: number): void {
    this.releasedBytes += bytes;
    if (this.releasedBytes < RETURN_AFTER_BYTES || this.timer) return;
    const wait = Math.max(SETTLE_MS, this.lastRun + RETURN_EVERY_MS - performance.now());
    this.timer = setTimeout(() => this.run(), wait);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  private run(): void {
    this.timer = null;
    this.releasedBytes = 0;
    this.lastRun = performance.now();
    const gc = reducingGc();
    if (!gc) return;
    gc({ type: "major", execution: "sync", flavor: "last-resort" });
    this.runs++;
  }
}
