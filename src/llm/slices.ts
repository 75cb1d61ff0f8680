// Turns of many episodes share the event loop in slices. What an answer sets off (env step,
// the next prompt, the next request) runs in a continuation of the engine's reply, and
// thousands of replies can arrive in one poll of the event loop (or none at all: the built-in
// policies answer without I/O). Run back to back, that work would hold timers, /healthz and
// every other client for as long as the burst takes. So an answer (and a group's build, its
// env resets) takes a slot before its episode goes on; slots are handed out first come first
// served, at most SLICE.turns or SLICE.ms of work between two turns of the event loop.

import { type Departure, WaitQueue } from "../concurrency/wait-queue.ts";

export const SLICE = { turns: 64, ms: 5 };

/** Turns granted in the current window, which closes at the event loop's next check phase. */
let granted = 0;
let windowStart = 0;
/** Turns waiting for a later window, in arrival order. */
const waiting = new WaitQueue();
let scheduled = false;

/** Undefined: go on now. Otherwise a promise that resolves when this turn's window opens. */
export function turnSlot(): Promise<Departure> | undefined {
  if (waiting.size === 0) {
    if (granted === 0) {
      windowStart = performance.now();
      nextWindow();
    }
    if (withinWindow()) {
      granted++;
      return undefined;
    }
  }
  // The caller awaits the queue's own promise: its turn runs as soon as it is woken (below).
  const slot = waiting.park();
  nextWindow();
  return slot;
}

function withinWindow(): boolean {
  return granted < SLICE.turns && performance.now() - windowStart < SLICE.ms;
}

/** At the next check phase (after pending I/O, and after timers on the next turn), a new window. */
function nextWindow(): void {
  if (scheduled) return;
  scheduled = true;
  setImmediate(releaseWindow);
}

/**
 * Releases waiting turns one at a time: each runs up to its next await before the clock is read
 * again, so a window holds SLICE.ms however heavy the turns (a group's Sokoban resets are).
 */
async function releaseWindow(): Promise<void> {
  scheduled = false;
  granted = 0;
  windowStart = performance.now();
  while (waiting.size > 0 && withinWindow()) {
    granted++;
    waiting.wakeNext();
    await null;
  }
  if (granted > 0) nextWindow();
}
