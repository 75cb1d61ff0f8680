// The one queue of parked callers behind every limit that makes work wait its turn (rollout
// slots, the memory budget, connections, engine replicas, OpenEnv sessions, the mock's slots…).
// First in, first out; a caller whose signal aborts leaves the queue at once (a linked list, so
// leaving costs O(1) wherever it stands); closing the queue dismisses every caller still in it.

/** How a parked caller left the queue: woken by the owner, aborted by its signal, or dismissed by close. */
export type Departure = "woken" | "aborted" | "closed";

interface Node<T> {
  readonly item: T;
  prev: Node<T> | null;
  next: Node<T> | null;
  settle: (departure: Departure) => void;
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
    if (this.#closed) return Promise.resolve("closed");
    if (signal?.aborted) return Promise.resolve("aborted");
    return new Promise<Departure>((resolve) => {
      const onAbort = () => {
        this.#unlink(node);
        resolve("aborted");
      };
      const node: Node<T> = {
        item,
        prev: this.#tail,
        next: null,
        settle: (departure) => {
          signal?.removeEventListener("abort", onAbort);
          resolve(departure);
        },
      };
      if (this.#tail) this.#tail.next = node;
      else this.#head = node;
      this.#tail = node;
      this.#size++;
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  /** The oldest parked item, if any. */
  peek(): T | undefined {
    return this.#head?.item;
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

  /** Removes one parked caller by its item (the first with that identity), waking it; false when not parked. */
  wake(item: T): boolean {
    for (let node = this.#head; node; node = node.next) {
      if (node.item !== item) continue;
      this.#unlink(node);
      node.settle("woken");
      return true;
    }
    return false;
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

  #unlink(node: Node<T>): void {
    // A node already unlinked (woken, then its signal aborted) is left as is.
    if (node.prev === null && this.#head !== node) return;
    if (node.prev) node.prev.next = node.next;
    else this.#head = node.next;
    if (node.next) node.next.prev = node.prev;
    else this.#tail = node.prev;
    node.prev = node.next = null;
    this.#size--;
  }
}
