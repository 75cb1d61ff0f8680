// The engine's slots (`maxConcurrency`): requests beyond them wait in a FIFO queue.

/** Engine slots: a counting semaphore with a FIFO queue whose waiters can give up. */
export class Slots {
  #free: number;
  readonly #queue: (() => void)[] = [];

  constructor(size: number) {
    this.#free = size;
  }

  async acquire(signal: AbortSignal): Promise<void> {
    signal.throwIfAborted();
    if (this.#free > 0 && this.#queue.length === 0) {
      this.#free--;
      return;
    }
    await new Promise<void>((resolve, reject) => {
      const grant = (): void => {
        signal.removeEventListener("abort", onAbort);
        resolve();
      };
      const onAbort = (): void => {
        const at = this.#queue.indexOf(grant);
        if (at >= 0) this.#queue.splice(at, 1);
        reject(signal.reason);
      };
      this.#queue.push(grant);
      signal.addEventListener("abort", onAbort, { once: true });
    });
  }

  release(): void {
    const next = this.#queue.shift();
    if (next) next();
    else this.#free++;
  }
}
