// Gives memory back after large releases (docs/server.md "Memory over time"). When sessions
// give back much of the memory budget at once (an env session full of 900 kB turns closed, a
// big batch acknowledged), V8 keeps the pages that held it in its pool, resident, and empties
// the pool only in a memory-reducing GC, which it runs when the process is idle: on a busy
// server, never. So the server's RSS would stay at its highest peak. Once what the budget holds
// has fallen RETURN_AFTER_BYTES below its peak, one memory-reducing GC is run (at most one per
// RETURN_EVERY_MS), so RSS follows what is held instead. The fall is counted net: a busy server
// releases far more than that every few seconds and holds as much again, and on a heap of that
// size the GC stops the event loop for seconds (10,240 episodes in flight: 3 to 5 s, every 30 s).
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";

/** How far what the memory budget holds must fall below its peak for a memory-reducing GC to run. */
export const RETURN_AFTER_BYTES = 64 << 20;
/** At most one such GC in this time (each stops the event loop: tens of milliseconds to seconds, with the heap). */
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
  /** The most the budget held since the last such GC (or the start). */
  private peakBytes = 0;
  private heldBytes = 0;
  private lastRun = Number.NEGATIVE_INFINITY;
  private timer: NodeJS.Timeout | null = null;
  /** Memory-reducing GCs run, since the server started. */
  runs = 0;

  /** The budget holds `bytes` now (after a charge or a release). */
  held(bytes: number): void {
    this.heldBytes = bytes;
    if (bytes > this.peakBytes) this.peakBytes = bytes;
    if (this.peakBytes - bytes < RETURN_AFTER_BYTES || this.timer) return;
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
    this.peakBytes = this.heldBytes;
    this.lastRun = performance.now();
    const gc = reducingGc();
    if (!gc) return;
    gc({ type: "major", execution: "sync", flavor: "last-resort" });
    this.runs++;
  }
}
