// Turns of many episodes share the event loop in slices. What an answer sets off (env step,
// the next prompt, the next request) runs in a continuation of the engine's reply, and
// thousands of replies can arrive in one poll of the event loop (or none at all: the built-in
// policies answer without I/O). Run back to back, that work would hold timers, /healthz and
// every other client for as long as the burst takes. So an answer (and a group's build, its
// env resets) takes a slot before its episode goes on; slots are handed out first come first
// served, at most SLICE.turns or SLICE.ms of work between two turns of the event loop.

export const SLICE = { turns: 64, ms: 5 };

/** Turns granted in the current window, which closes at the event loop's next check phase. */
let granted = 0;
let windowStart = 0;
/** Turns waiting for a later window, in arrival order (from `head` on). */
let waiting: (() => void)[] = [];
let head = 0;
let scheduled = false;

/** Undefined: go on now. Otherwise a promise that resolves when this turn's window opens. */
export function turnSlot(): Promise<void> | undefined {
  if (head === waiting.length) {
    if (granted === 0) {
      windowStart = performance.now();
      nextWindow();
    }
    if (withinWindow()) {
      granted++;
      return undefined;
    }
  }
  const slot = new Promise<void>((resolve) => waiting.push(resolve));
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
  while (head < waiting.length && withinWindow()) {
    granted++;
    waiting[head++]();
    await null;
  }
  if (head === waiting.length) {
    waiting = [];
    head = 0;
  }
  if (granted > 0) nextWindow();
}
