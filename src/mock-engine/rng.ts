// Seeded randomness for the mock engine. Every draw comes from a small RNG seeded by hashing
// (engine seed, purpose, index), so a decision depends on *which* request it is, not on the
// order in which concurrent requests happen to be handled.

/** murmur3's 32-bit finaliser: spreads every input bit over the output. */
function fmix32(h: number): number {
  let x = h >>> 0;
  x ^= x >>> 16;
  x = Math.imul(x, 0x85ebca6b);
  x ^= x >>> 13;
  x = Math.imul(x, 0xc2b2ae35);
  x ^= x >>> 16;
  return x >>> 0;
}

/** FNV-1a over UTF-16 code units, finalised. Not cryptographic; only needs to be stable. */
export function hashString(text: string, seed = 0): number {
  let h = (0x811c9dc5 ^ seed) >>> 0;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return fmix32(h);
}

/** One 32-bit seed from several parts (numbers are hashed by their decimal text). */
export function mixSeed(...parts: readonly (number | string)[]): number {
  let h = 0x9e3779b9;
  for (const part of parts) h = hashString(typeof part === "number" ? String(part) : part, h);
  return h;
}

/** splitmix32: tiny, fast, and good enough for picking actions and fault outcomes. */
export class Rng {
  #state: number;

  constructor(seed: number) {
    this.#state = seed >>> 0;
  }

  /** A float in [0, 1). */
  next(): number {
    this.#state = (this.#state + 0x9e3779b9) >>> 0;
    return fmix32(this.#state) / 4294967296;
  }

  /** An integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }

  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)];
  }
}
