// CPython 3.11 `random.Random` (the MT19937 core plus Lib/random.py's integer helpers).
// Only the calls RAGEN makes are modelled; `gauss_next` is not, since nothing here reads it.

import { MT19937, type MT19937State } from "./mt19937.ts";

const TWO_POW_32 = 4294967296;
const MAX_RANDBELOW = 2 ** 53;

export type PythonRandomState = MT19937State;

/** `random.seed(int)`: |seed| as little-endian 32-bit words; 0 gives the key [0]. */
function seedKey(seed: number | bigint): number[] {
  if (typeof seed === "number") {
    if (!Number.isInteger(seed)) throw new RangeError(`PythonRandom seed must be an integer, got ${seed}`);
    if (Number.isSafeInteger(seed)) {
      const n = Math.abs(seed);
      const hi = Math.floor(n / TWO_POW_32);
      const lo = n - hi * TWO_POW_32;
      return hi === 0 ? [lo] : [lo, hi];
    }
    seed = BigInt(seed);
  }
  let n = seed < 0n ? -seed : seed;
  const key: number[] = [];
  do {
    key.push(Number(n & 0xffffffffn));
    n >>= 32n;
  } while (n > 0n);
  return key;
}

/** Bounds may reach ±2**53: every integer result between them is still exact. */
function checkBound(name: string, value: number): void {
  if (!Number.isInteger(value) || Math.abs(value) > MAX_RANDBELOW) {
    throw new RangeError(`${name} must be an integer within ±2**53, got ${value}`);
  }
}

export class PythonRandom {
  private readonly mt: MT19937;

  constructor(seed: number | bigint | MT19937) {
    this.mt = seed instanceof MT19937 ? seed : MT19937.fromKey(seedKey(seed));
  }

  static fromState(state: PythonRandomState): PythonRandom {
    return new PythonRandom(MT19937.fromState(state));
  }

  getState(): PythonRandomState {
    return this.mt.getState();
  }

  random(): number {
    return this.mt.nextDouble();
  }

  /** Top k bits of one output for k ≤ 32; above that the low word is drawn first. */
  getrandbits(k: number): number {
    if (!Number.isInteger(k) || k < 0 || k > 53) {
      throw new RangeError(`getrandbits supports 0 <= k <= 53, got ${k}`);
    }
    return this.bits(k);
  }

  /** `_randbelow_with_getrandbits`: k = n.bit_length() (not of n-1), so powers of two reject too. */
  randbelow(n: number): number {
    if (!Number.isInteger(n) || n <= 0 || n > MAX_RANDBELOW) {
      throw new RangeError(`randbelow needs an integer 0 < n <= 2**53, got ${n}`);
    }
    if (n < TWO_POW_32) {
      const shift = Math.clz32(n);
      const mt = this.mt;
      let r = mt.nextUint32() >>> shift;
      while (r >= n) r = mt.nextUint32() >>> shift;
      return r;
    }
    const k = 64 - Math.clz32(Math.floor(n / TWO_POW_32));
    // k can be 54 for n = 2**53; rejected values may round, but never below n.
    let r = this.bits(k);
    while (r >= n) r = this.bits(k);
    return r;
  }

  randrange(start: number, stop?: number): number {
    checkBound("randrange start", start);
    if (stop === undefined) {
      if (start > 0) return this.randbelow(start);
      throw new RangeError("empty range for randrange()");
    }
    checkBound("randrange stop", stop);
    const width = stop - start;
    if (width > 0) return start + this.randbelow(width);
    throw new RangeError(`empty range for randrange() (${start}, ${stop}, ${width})`);
  }

  randint(a: number, b: number): number {
    // b + 1 must not round.
    if (b === MAX_RANDBELOW) throw new RangeError("randint b must be below 2**53");
    checkBound("randint b", b);
    return this.randrange(a, b + 1);
  }

  choice<T>(seq: readonly T[]): T {
    if (seq.length === 0) throw new RangeError("Cannot choose from an empty sequence");
    return seq[this.randbelow(seq.length)];
  }

  /** CPython's `sample`: a shrinking pool for small n, else rejection against a set of picks. */
  sample<T>(population: readonly T[], k: number): T[] {
    const n = population.length;
    if (!Number.isInteger(k) || k < 0 || k > n) {
      throw new RangeError("Sample larger than population or is negative");
    }
    const result = new Array<T>(k);
    if (n <= sampleSetSize(k)) {
      const pool = population.slice();
      for (let i = 0; i < k; i++) {
        const j = this.randbelow(n - i);
        result[i] = pool[j];
        pool[j] = pool[n - i - 1];
      }
    } else {
      const selected = new Set<number>();
      for (let i = 0; i < k; i++) {
        let j = this.randbelow(n);
        while (selected.has(j)) j = this.randbelow(n);
        selected.add(j);
        result[i] = population[j];
      }
    }
    return result;
  }

  shuffle<T>(items: T[]): void {
    for (let i = items.length - 1; i > 0; i--) {
      const j = this.randbelow(i + 1);
      const tmp = items[i];
      items[i] = items[j];
      items[j] = tmp;
    }
  }

  private bits(k: number): number {
    if (k === 0) return 0;
    if (k <= 32) return this.mt.nextUint32() >>> (32 - k);
    const lo = this.mt.nextUint32();
    const hi = this.mt.nextUint32() >>> (64 - k);
    return hi * TWO_POW_32 + lo;
  }
}

/**
 * `21 + 4 ** ceil(log(3k, 4))` for k > 5. 3k is never a power of 4, so the smallest power of 4
 * above 3k equals what CPython's float log computes for any k an array can hold.
 */
function sampleSetSize(k: number): number {
  if (k <= 5) return 21;
  let power = 1;
  while (power < 3 * k) power *= 4;
  return 21 + power;
}
