// NumPy's legacy `np.random.RandomState(seed)`: MT19937 seeded with init_genrand, bounded
// integers by masked rejection (RandomState never uses Lemire, for stream compatibility).
// The legacy gauss cache (has_gauss/gauss) only feeds normal-family draws, none of which are
// modelled, so it is not part of the state here; MT19937 has no uint32 buffer.

import { integerSpan } from "./bounds.ts";
import { MT19937, type MT19937State } from "./mt19937.ts";

const TWO_POW_32 = 4294967296;
/**
 * The largest seed numpy's RandomState takes (uint32). Sokoban seeds one with the episode's seed,
 * so it bounds every seed: the wire's MAX_SEED (protocol/seeds.ts) is the same number, a test
 * holds them equal (envs and protocol import nothing).
 */
export const MAX_RANDOM_STATE_SEED = TWO_POW_32 - 1;

export type NumpyRandomStateState = MT19937State;

/** Smallest all-ones mask >= value, for value < 2**32. */
function mask32(value: number): number {
  let mask = value;
  mask |= mask >>> 1;
  mask |= mask >>> 2;
  mask |= mask >>> 4;
  mask |= mask >>> 8;
  mask |= mask >>> 16;
  return mask >>> 0;
}

export class NumpyRandomState {
  private readonly mt: MT19937;

  constructor(seed: number | MT19937) {
    if (seed instanceof MT19937) {
      this.mt = seed;
      return;
    }
    if (typeof seed !== "number" || !Number.isInteger(seed) || seed < 0 || seed > MAX_RANDOM_STATE_SEED) {
      throw new RangeError(`RandomState seed must be an integer between 0 and 2**32 - 1, got ${seed}`);
    }
    this.mt = MT19937.fromSeed(seed);
  }

  static fromState(state: NumpyRandomStateState): NumpyRandomState {
    return new NumpyRandomState(MT19937.fromState(state));
  }

  getState(): NumpyRandomStateState {
    return this.mt.getState();
  }

  /** `randint(low, high)` in [low, high); `randint(n)` in [0, n). Default dtype int64. */
  randint(low: number, high?: number): number {
    const { low: start, span: rng } = integerSpan("randint", low, high);
    // A one-value range draws nothing.
    if (rng === 0) return start;
    const mt = this.mt;
    if (rng < 0xffffffff) {
      const mask = mask32(rng);
      let val = (mt.nextUint32() & mask) >>> 0;
      while (val > rng) val = (mt.nextUint32() & mask) >>> 0;
      return start + val;
    }
    if (rng === 0xffffffff) return start + mt.nextUint32();
    if (!Number.isSafeInteger(rng)) throw new RangeError(`randint range too wide: ${start}, ${high}`);
    // 64-bit masked path: next64 = first output << 32 | second output; the start word is all ones.
    const maskHi = mask32(Math.floor(rng / TWO_POW_32));
    let val: number;
    do {
      const hi = (mt.nextUint32() & maskHi) >>> 0;
      val = hi * TWO_POW_32 + mt.nextUint32();
    } while (val > rng);
    return start + val;
  }

  randomSample(): number {
    return this.mt.nextDouble();
  }

  /** `choice(n)` without `p`: `randint(0, n)`. */
  choice(n: number): number {
    if (!Number.isSafeInteger(n) || n <= 0) {
      throw new RangeError(`a must be greater than 0 unless no samples are taken, got ${n}`);
    }
    return this.randint(0, n);
  }
}
