// A signal that aborts when its parent does or a time limit passes, and then lets go of both:
// AbortSignal.timeout leaves its timer pending for the whole limit and AbortSignal.any keeps a
// link on a long-lived parent (a rollout's signal), which thousands of requests per second
// would pile up. `dispose()` clears the timer and the link to the parent at once.
//
// Children do not listen on the parent themselves: a parent gets one listener, which aborts a
// set of children. Node's EventTarget walks its whole listener list on every add and remove, so
// with 10,000 requests in flight on one rollout signal a listener per request would make each
// request cost O(requests in flight); a Set makes joining and leaving O(1).

export interface Deadline {
  readonly signal: AbortSignal;
  /** True when the time limit (not the parent) ended it. */
  readonly expired: boolean;
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

export function deadline(timeoutMs: number, parent?: AbortSignal): Deadline {
  const controller = new AbortController();
  let expired = false;
  // setTimeout fires at once past 2^31 − 1 ms (24.8 days); such a limit means "never" here.
  const timer = setTimeout(
    () => {
      expired = true;
      controller.abort(new DOMException(`timed out after ${timeoutMs} ms`, "TimeoutError"));
    },
    Math.min(timeoutMs, 2 ** 31 - 1),
  );
  let leave: (() => void) | null = null;
  if (parent?.aborted) controller.abort(parent.reason);
  else if (parent) leave = onParentAbort(parent, () => controller.abort(parent.reason));
  return {
    signal: controller.signal,
    get expired() {
      return expired;
    },
    dispose() {
      clearTimeout(timer);
      leave?.();
    },
  };
}
