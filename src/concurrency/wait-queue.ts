// The one queue of parked callers behind every limit that makes work wait its turn (rollout
// slots, the memory budget, connections, engine replicas, OpenEnv sessions, the mock's slots…).
// First in, first out; a caller whose signal aborts leaves the queue at once (a linked list, so
// leaving costs O(1) wherever it stands); closing the queue dismisses every caller still in it.
// An owner with several queues (a pool's queue per replica and one for any replica) holds each
// caller's Parked handle to wake or move it without a search; a moved caller keeps its place in
// line, since every caller carries when it arrived.

/** How a parked caller left the queue: woken by the owner, aborted by its signal, or dismissed by close. */
export type Departure = "woken" | "aborted" | "closed";

/** A caller as its owner holds it, to wake it or move it to another queue in O(1). */
export interface Parked<T> {
  readonly item: T;
  /** Its place in line, counted over every queue: the lower, the earlier it arrived. */
  readonly arrival: number;
  /** Resolves with how it left; never rejects. */
  readonly departure: Promise<Departure>;
  /** The queue it waits in now, or null once it has left. */
  readonly queue: WaitQueue<T> | null;
}

/** Arrivals over all queues, so callers moved between queues keep their order. */
let arrivals = 0;

class Node<T> implements Parked<T> {
  readonly item: T;
  readonly arrival = arrivals++;
  queue: WaitQueue<T> | null = null;
  prev: Node<T> | null = null;
  next: Node<T> | null = null;
  // The promise is made when first asked for: an enqueued task nobody awaits costs none.
  #departure: Promise<Departure> | null = null;
  #resolve: ((departure: Departure) => void) | null = null;
  #settled: Departure | null = null;
  #signal: AbortSignal | undefined;
  #onAbort: (() => void) | undefined;

  constructor(item: T) {
    this.item = item;
  }

  get departure(): Promise<Departure> {
    if (this.#departure === null) {
      const { promise, resolve } = Promise.withResolvers<Departure>();
      if (this.#settled) resolve(this.#settled);
      else this.#resolve = resolve;
      this.#departure = promise;
    }
    return this.#departure;
  }

  /** Calls `onAbort` when `signal` aborts before the caller has left. */
  listen(signal: AbortSignal, onAbort: () => void): void {
    this.#signal = signal;
    this.#onAbort = onAbort;
    signal.addEventListener("abort", onAbort, { once: true });
  }

  settle(departure: Departure): void {
    if (this.#onAbort) this.#signal?.removeEventListener("abort", this.#onAbort);
    this.#onAbort = undefined;
    this.#settled ??= departure;
    this.#resolve?.(departure);
  }
}

export class WaitQueue<T = void> {
  #head: Node<T> | null = null;
  #tail: Node<T> | null = null;
  #size = 0;
  #closed = false;

  get size(): number {
    return this.#size;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /**
   * Parks a caller carrying `item` (what the owner needs to decide whether it may go: its size,
   * its key…) and resolves with how it left. Never rejects: an abort or a close is an answer the
   * caller turns into its own error, since each limit words its refusal differently.
   */
  park(item: T, signal?: AbortSignal): Promise<Departure> {
    return this.enter(item, signal).departure;
  }

  /** Parks like `park`, and returns the caller's handle (its departure says how it left). */
  enter(item: T, signal?: AbortSignal): Parked<T> {
    const node = new Node(item);
    if (this.#closed) node.settle("closed");
    else if (signal?.aborted) node.settle("aborted");
    else {
      this.#linkAfter(node, this.#tail);
      if (signal)
        node.listen(signal, () => {
          // Wherever it waits now: the owner may have moved it.
          if (node.queue) node.queue.#unlink(node);
          node.settle("aborted");
        });
    }
    return node;
  }

  /**
   * Queues `item` with no caller waiting on it (a deferred task the owner runs as it takes it with
   * wakeNext): in line like a parked caller, without the promise.
   */
  enqueue(item: T): void {
    this.enter(item);
  }

  /**
   * Parks until `ready()` holds, asking again each time the caller is woken: true once it holds,
   * false when `signal` aborts first or the queue closes. For owners that wake everyone on any
   * change and let each caller judge its own condition.
   */
  async until(this: WaitQueue<void>, ready: () => boolean, signal?: AbortSignal): Promise<boolean> {
    for (;;) {
      if (signal?.aborted) return false;
      if (ready()) return true;
      if ((await this.park(undefined, signal)) === "closed") return false;
    }
  }

  /** The oldest parked item, if any. */
  peek(): T | undefined {
    return this.#head?.item;
  }

  /** The oldest parked caller's handle, if any. */
  first(): Parked<T> | undefined {
    return this.#head ?? undefined;
  }

  /** Wakes the oldest caller; returns its item, or undefined when none waits. */
  wakeNext(): T | undefined {
    const node = this.#head;
    if (!node) return undefined;
    this.#unlink(node);
    node.settle("woken");
    return node.item;
  }

  /**
   * Wakes, in arrival order, each caller whose item `admit` accepts, and returns how many. `admit`
   * is asked one caller at a time, so it may charge what it admits before judging the next one.
   */
  wakeWhere(admit: (item: T) => boolean): number {
    let woken = 0;
    for (let node = this.#head; node; ) {
      const next = node.next;
      if (admit(node.item)) {
        this.#unlink(node);
        node.settle("woken");
        woken++;
      }
      node = next;
    }
    return woken;
  }

  /** Wakes every caller, oldest first; returns how many. */
  wakeAll(): number {
    return this.wakeWhere(() => true);
  }

  /** Wakes the caller of a handle parked here; false when it is not (it left, or waits elsewhere). */
  wakeParked(parked: Parked<T>): boolean {
    const node = parked as Node<T>;
    if (node.queue !== this) return false;
    this.#unlink(node);
    node.settle("woken");
    return true;
  }

  /**
   * Moves a caller parked in another queue into this one, in its place by arrival; its signal
   * goes with it. Dismissed ("closed") when this queue is closed. False when it has left, or
   * waits here already.
   */
  take(parked: Parked<T>): boolean {
    const node = parked as Node<T>;
    const from = node.queue;
    if (from === null || from === this) return false;
    from.#unlink(node);
    if (this.#closed) node.settle("closed");
    else {
      let after = this.#tail;
      while (after && after.arrival > node.arrival) after = after.prev;
      this.#linkAfter(node, after);
    }
    return true;
  }

  /** Moves every caller of `from` into this one, merged by arrival; returns how many. */
  takeAll(from: WaitQueue<T>): number {
    if (from === this) return 0;
    let moved = 0;
    // Newest first, so one walk back through this queue finds every place.
    let after = this.#tail;
    for (let node = from.#tail; node; node = from.#tail) {
      from.#unlink(node);
      moved++;
      if (this.#closed) {
        node.settle("closed");
        continue;
      }
      while (after && after.arrival > node.arrival) after = after.prev;
      this.#linkAfter(node, after);
    }
    return moved;
  }

  /** Dismisses every caller ("closed") and refuses later ones the same way. */
  close(): void {
    this.#closed = true;
    for (let node = this.#head; node; node = this.#head) {
      this.#unlink(node);
      node.settle("closed");
    }
  }

  /** The parked items, oldest first. */
  *[Symbol.iterator](): IterableIterator<T> {
    for (let node = this.#head; node; node = node.next) yield node.item;
  }

  /** Links `node` right after `after`, or first when `after` is null. */
  #linkAfter(node: Node<T>, after: Node<T> | null): void {
    node.prev = after;
    node.next = after ? after.next : this.#head;
    if (node.next) node.next.prev = node;
    else this.#tail = node;
    if (after) after.next = node;
    else this.#head = node;
    node.queue = this;
    this.#size++;
  }

  #unlink(node: Node<T>): void {
    // A node already unlinked (woken, then its signal aborted) or parked elsewhere is left as is.
    if (node.queue !== this) return;
    if (node.prev) node.prev.next = node.next;
    else this.#head = node.next;
    if (node.next) node.next.prev = node.prev;
    else this.#tail = node.prev;
    node.prev = node.next = null;
    node.queue = null;
    this.#size--;
  }
}
