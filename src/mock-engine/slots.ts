// The engine's slots (`maxConcurrency`): requests beyond them wait in a FIFO queue.
import { WaitQueue } from "../concurrency/wait-queue.ts";

/** Engine slots: a counting semaphore with a FIFO queue whose waiters can give up. */
export class Slots {
  #free: number;
  readonly #queue = new WaitQueue();

  constructor(size: number) {
    this.#free = size;
  }

  async acquire(signal: AbortSignal): Promise<void> {
    signal.throwIfAborted();
    if (this.#free > 0 && this.#queue.size === 0) {
      this.#free--;
      return;
    }
    // A release hands its slot straight to the oldest waiter.
    if ((await this.#queue.park(undefined, signal)) === "aborted") throw signal.reason;
  }

  release(): void {
    if (this.#queue.size > 0) this.#queue.wakeNext();
    else this.#free++;
  }
}
