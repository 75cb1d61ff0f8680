// Time limits for engine requests, checked by one sweep, and links to a parent signal.
//
// One timer for everything in flight: a timer per request (armed, then cleared when the answer
// comes, thousands of times a second) was a measurable share of a request's CPU. The sweep runs
// every SWEEP_MS while anything is watched and stops once nothing is, so a limit fires up to
// SWEEP_MS late; engine limits are seconds to minutes. The sweep's timer keeps the process
// alive while a request is in flight, as a per-request timer did (idle sockets do not).
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

/** How often the sweep looks for limits that have passed. */
export const SWEEP_MS = 100;

/** Something with a time limit, watched by the sweep until it is let go or expires. */
export interface Timed {
  /** Date.now() when its time started. */
  readonly started: number;
  readonly timeoutMs: number;
  readonly clock: PauseClock | undefined;
  /** The clock's pausedMs() when its time started. */
  readonly pausedAtStart: number;
  /** Its place among the watched, -1 when not watched (the sweep's to set; start it at -1). */
  sweepSlot: number;
  /** Called once, when the limit has passed; the sweep has let go of it already. */
  expire(): void;
}

/** Milliseconds counted against a limit at `now`, time paused on its clock left out. */
export function spentMs(timed: Timed, now = Date.now()): number {
  const paused = timed.clock === undefined ? 0 : timed.clock.pausedMs() - timed.pausedAtStart;
  return now - timed.started - paused;
}

/** Everything watched, in no order: each knows its slot, so letting go is a swap with the last. */
const watched: Timed[] = [];
let sweeper: NodeJS.Timeout | null = null;
/** No watched limit can pass before this time (a lower bound: let-go entries are not subtracted). */
let nextDue = Number.POSITIVE_INFINITY;

/** Starts checking `timed` against its limit. */
export function watch(timed: Timed): void {
  if (timed.sweepSlot !== -1) return;
  timed.sweepSlot = watched.length;
  watched.push(timed);
  const due = timed.started + timed.timeoutMs;
  if (due < nextDue) nextDue = due;
  sweeper ??= setInterval(sweep, SWEEP_MS);
}

/** Stops checking `timed` (its request ended). */
export function unwatch(timed: Timed): void {
  const slot = timed.sweepSlot;
  if (slot === -1) return;
  const last = watched.pop() as Timed;
  if (last !== timed) {
    watched[slot] = last;
    last.sweepSlot = slot;
  }
  timed.sweepSlot = -1;
}

function sweep(): void {
  if (watched.length === 0) {
    clearInterval(sweeper ?? undefined);
    sweeper = null;
    nextDue = Number.POSITIVE_INFINITY;
    return;
  }
  const now = Date.now();
  if (now < nextDue) return;
  let next = Number.POSITIVE_INFINITY;
  const due: Timed[] = [];
  for (const timed of watched) {
    // Paused time only ever lengthens a limit, so the unpaused end is the earliest it can pass.
    const earliest = timed.started + timed.timeoutMs;
    if (now < earliest) {
      if (earliest < next) next = earliest;
      continue;
    }
    // A pause in progress holds the limit; it is checked again at each sweep until the pause ends.
    if (timed.clock?.paused) {
      next = now;
      continue;
    }
    const end = earliest + (timed.clock === undefined ? 0 : timed.clock.pausedMs() - timed.pausedAtStart);
    if (now < end) {
      if (end < next) next = end;
    } else due.push(timed);
  }
  nextDue = next;
  // Expired after the walk: an expire() may watch or let go of others (watch() lowers nextDue).
  for (const timed of due) {
    if (timed.sweepSlot === -1) continue;
    unwatch(timed);
    timed.expire();
  }
}

/** One child of a parent signal: told when the parent aborts. */
export interface ParentChild {
  parentAborted(): void;
}

/** The live children of each parent signal; the parent's single listener aborts them. */
const children = new WeakMap<AbortSignal, Set<ParentChild>>();

/** Tells `child` when `parent` aborts, until leaveParent. The parent must not have aborted yet. */
export function joinParent(parent: AbortSignal, child: ParentChild): void {
  let set = children.get(parent);
  if (set === undefined) {
    const fresh = new Set<ParentChild>();
    set = fresh;
    children.set(parent, fresh);
    parent.addEventListener(
      "abort",
      () => {
        children.delete(parent);
        for (const member of [...fresh]) member.parentAborted();
        fresh.clear();
      },
      { once: true },
    );
  }
  set.add(child);
}

export function leaveParent(parent: AbortSignal, child: ParentChild): void {
  children.get(parent)?.delete(child);
}

/** Calls `onAbort` when `parent` aborts; the returned function unsubscribes. */
export function onParentAbort(parent: AbortSignal, onAbort: () => void): () => void {
  const child: ParentChild = { parentAborted: onAbort };
  joinParent(parent, child);
  return () => leaveParent(parent, child);
}

export interface Deadline {
  readonly signal: AbortSignal;
  /** True when the time limit (not the parent) ended it. */
  readonly expired: boolean;
  /** Milliseconds counted against the limit so far (time paused on its clock left out). */
  spentMs(): number;
  dispose(): void;
}

/** A signal that aborts when its parent does or its time limit passes (on the sweep). */
class SweptDeadline implements Deadline, Timed, ParentChild {
  readonly started = Date.now();
  readonly pausedAtStart: number;
  readonly signal: AbortSignal;
  sweepSlot = -1;
  expired = false;
  readonly timeoutMs: number;
  readonly clock: PauseClock | undefined;
  private readonly parent: AbortSignal | undefined;
  private readonly controller = new AbortController();

  constructor(timeoutMs: number, parent: AbortSignal | undefined, clock: PauseClock | undefined) {
    this.timeoutMs = timeoutMs;
    this.parent = parent;
    this.clock = clock;
    this.pausedAtStart = clock?.pausedMs() ?? 0;
    this.signal = this.controller.signal;
    if (parent?.aborted) {
      this.controller.abort(parent.reason);
      return;
    }
    watch(this);
    if (parent !== undefined) joinParent(parent, this);
  }

  spentMs(): number {
    return spentMs(this);
  }

  expire(): void {
    this.expired = true;
    if (this.parent !== undefined) leaveParent(this.parent, this);
    this.controller.abort(new DOMException(`timed out after ${this.timeoutMs} ms`, "TimeoutError"));
  }

  parentAborted(): void {
    unwatch(this);
    this.controller.abort(this.parent?.reason);
  }

  dispose(): void {
    unwatch(this);
    if (this.parent !== undefined) leaveParent(this.parent, this);
  }
}

export function deadline(timeoutMs: number, parent?: AbortSignal, clock?: PauseClock): Deadline {
  return new SweptDeadline(timeoutMs, parent, clock);
}
