// A binary min-heap by a numeric key, shared by the tokenizer's BPE merges and the scheduler's
// job queues.

export class MinHeap<T> {
  readonly #items: T[] = [];
  readonly #key: (item: T) => number;

  constructor(key: (item: T) => number) {
    this.#key = key;
  }

  get size(): number {
    return this.#items.length;
  }

  push(item: T): void {
    const items = this.#items;
    let i = items.length;
    items.push(item);
    const k = this.#key(item);
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (this.#key(items[parent]) <= k) break;
      items[i] = items[parent];
      i = parent;
    }
    items[i] = item;
  }

  /** The item with the smallest key, or undefined when empty. */
  peek(): T | undefined {
    return this.#items[0];
  }

  /** Removes and returns the item with the smallest key, or undefined when empty. */
  pop(): T | undefined {
    const items = this.#items;
    const top = items[0];
    const last = items.pop();
    if (items.length === 0 || last === undefined) return top;
    const k = this.#key(last);
    let i = 0;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= items.length) break;
      const right = left + 1;
      const child = right < items.length && this.#key(items[right]) < this.#key(items[left]) ? right : left;
      if (this.#key(items[child]) >= k) break;
      items[i] = items[child];
      i = child;
    }
    items[i] = last;
    return top;
  }

  clear(): void {
    this.#items.length = 0;
  }
}
