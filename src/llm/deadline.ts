// A signal that aborts when its parent does or a time limit passes, and then lets go of both:
// AbortSignal.timeout leaves its timer pending for the whole limit and AbortSignal.any keeps a
// link on a long-lived parent (a rollout's signal), which thousands of requests per second
// would pile up. `dispose()` clears the timer and the link to the parent at once.
//
// Children do not listen on the parent themselves: a parent gets one listener, which aborts a
// set of children. Node's EventTarget walks its whole listener list on every add and remove, so
// with 10,000 requests in flight on one rollout signal a listener per request would make each
// request cost O(requests in flight); a Set makes joining and leaving O(1).

/**
 * Time that does not count against limits: the spans in which a weight update holds the
 * engines (issue #22). A deadline on such a clock stretches by the time paused inside it.
 */
export interface PauseClock {
  /** Milliseconds paused so far, a pause in progress counted up to now. */
  pausedMs(): number;
  readonly paused: boolean;
  /** Calls `fn` once, when the pause in progress ends; returns the unsubscribe. */
  onResume(fn: () => void): () => void;
}

export interface Deadline {
  readonly signal: AbortSignal;
  /** True when the time limit (not the parent) ended it. */
  readonly expired: boolean;
  /** Milliseconds counted against the limit so far (time paused on its clock left out). */
  spentMs(): number;
  dispose(): void;
}

/** The live children of each parent signal; the parent's single listener aborts them. */
const children = new WeakMap<AbortSignal, Set<() => void>>();

/** Calls `onAbort` when `parent` aborts; the returned function unsubscribes. */
export function onParentAbort(parent: AbortSignal, onAbort: () => void): () => void {
  let set = children.get(parent);
  if (set === undefined) {
    const fresh = new Set<() => void>();
    set = fresh;
    children.set(parent, fresh);
    parent.addEventListener(
      "abort",
      () => {
        children.delete(parent);
        for (const child of [...fresh]) child();
        fresh.clear();
      },
      { once: true },
    );
  }
  set.add(onAbort);
  const joined = set;
  return () => {
    joined.delete(onAbort);
  };
}

export function deadline(timeoutMs: number, parent?: AbortSignal, clock?: PauseClock): Deadline {
  const controller = new AbortController();
  let expired = false;
  let timer: NodeJS.Timeout | undefined;
  let leaveResume: (() => void) | null = null;
  const started = Date.now();
  const pausedAtStart = clock?.pausedMs() ?? 0;
  const spentMs = (): number => Date.now() - started - ((clock?.pausedMs() ?? 0) - pausedAtStart);
  const expire = (): void => {
    expired = true;
    controller.abort(new DOMException(`timed out after ${timeoutMs} ms`, "TimeoutError"));
  };
  // setTimeout fires at once past 2^31 − 1 ms (24.8 days); such a limit means "never" here.
  const arm = (ms: number): void => {
    timer = setTimeout(check, Math.min(ms, 2 ** 31 - 1));
  };
  // Without a clock the first firing ends it; with one, paused time is given back first.
  function check(): void {
    timer = undefined;
    if (clock === undefined) {
      expire();
      return;
    }
    if (clock.paused) {
      leaveResume = clock.onResume(() => {
        leaveResume = null;
        check();
      });
      return;
    }
    const spent = spentMs();
    if (spent >= timeoutMs) expire();
    else arm(timeoutMs - spent);
  }
  arm(timeoutMs);
  let leave: (() => void) | null = null;
  if (parent?.aborted) controller.abort(parent.reason);
  else if (parent) leave = onParentAbort(parent, () => controller.abort(parent.reason));
  return {
    signal: controller.signal,
    get expired() {
      return expired;
    },
    spentMs,
    dispose() {
      clearTimeout(timer);
      leaveResume?.();
      leave?.();
    },
  };
}
