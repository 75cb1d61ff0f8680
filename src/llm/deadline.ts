// A signal that aborts when its parent does or a time limit passes, and then lets go of both:
// AbortSignal.timeout leaves its timer pending for the whole limit and AbortSignal.any keeps a
// link on a long-lived parent (a rollout's signal), which thousands of requests per second
// would pile up. `dispose()` clears the timer and the parent listener at once.

export interface Deadline {
  readonly signal: AbortSignal;
  /** True when the time limit (not the parent) ended it. */
  readonly expired: boolean;
  dispose(): void;
}

export function deadline(timeoutMs: number, parent?: AbortSignal): Deadline {
  const controller = new AbortController();
  let expired = false;
  const onAbort = () => controller.abort(parent?.reason);
  // setTimeout fires at once past 2^31 − 1 ms (24.8 days); such a limit means "never" here.
  const timer = setTimeout(
    () => {
      expired = true;
      controller.abort(new DOMException(`timed out after ${timeoutMs} ms`, "TimeoutError"));
    },
    Math.min(timeoutMs, 2 ** 31 - 1),
  );
  if (parent?.aborted) onAbort();
  else parent?.addEventListener("abort", onAbort, { once: true });
  return {
    signal: controller.signal,
    get expired() {
      return expired;
    },
    dispose() {
      clearTimeout(timer);
      parent?.removeEventListener("abort", onAbort);
    },
  };
}
