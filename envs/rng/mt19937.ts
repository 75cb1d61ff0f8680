// MT19937 (Matsumoto & Nishimura), bit-exact with the reference mt19937ar.c that both
// CPython's `random` and NumPy's legacy `RandomState` wrap.

const N = 624;
const M = 397;
const MATRIX_A = 0x9908b0df;
const UPPER_MASK = 0x80000000;
const LOWER_MASK = 0x7fffffff;
const TWO_POW_26 = 67108864;
const TWO_POW_MINUS_53 = 1 / 9007199254740992;

/** JSON-serialisable snapshot: the 624 state words and the read position (624 = refill due). */
export interface MT19937State {
  key: number[];
  pos: number;
}

function isUint32(value: number): boolean {
  return Number.isInteger(value) && value >= 0 && value <= 0xffffffff;
}

function initGenrand(mt: Uint32Array, seed: number): void {
  mt[0] = seed;
  for (let i = 1; i < N; i++) {
    const prev = mt[i - 1];
    mt[i] = Math.imul(1812433253, prev ^ (prev >>> 30)) + i;
  }
}

export class MT19937 {
  private readonly mt: Uint32Array;
  private pos: number;

  private constructor(mt: Uint32Array, pos: number) {
    this.mt = mt;
    this.pos = pos;
  }

  /** `init_genrand(seed)`: NumPy `RandomState(seed)` seeding. */
  static fromSeed(seed: number): MT19937 {
    if (!isUint32(seed)) {
      throw new RangeError(`MT19937 seed must be an integer in [0, 2**32 - 1], got ${seed}`);
    }
    const mt = new Uint32Array(N);
    initGenrand(mt, seed);
    return new MT19937(mt, N);
  }

  /** `init_by_array(key)`: CPython `random.seed(int)` seeding. */
  static fromKey(key: ArrayLike<number>): MT19937 {
    const len = key.length;
    if (len === 0) throw new RangeError("MT19937 init_by_array needs a non-empty key");
    for (let n = 0; n < len; n++) {
      if (!isUint32(key[n])) throw new RangeError(`MT19937 key word ${n} is not a uint32: ${key[n]}`);
    }
    const mt = new Uint32Array(N);
    initGenrand(mt, 19650218);
    let i = 1;
    let j = 0;
    for (let k = Math.max(N, len); k > 0; k--) {
      const prev = mt[i - 1];
      mt[i] = (mt[i] ^ Math.imul(prev ^ (prev >>> 30), 1664525)) + key[j] + j;
      i++;
      j++;
      if (i >= N) {
        mt[0] = mt[N - 1];
        i = 1;
      }
      if (j >= len) j = 0;
    }
    for (let k = N - 1; k > 0; k--) {
      const prev = mt[i - 1];
      mt[i] = (mt[i] ^ Math.imul(prev ^ (prev >>> 30), 1566083941)) - i;
      i++;
      if (i >= N) {
        mt[0] = mt[N - 1];
        i = 1;
      }
    }
    // Guarantees a non-zero state whatever the key.
    mt[0] = 0x80000000;
    return new MT19937(mt, N);
  }

  static fromState(state: MT19937State): MT19937 {
    const { key, pos } = state;
    if (!Array.isArray(key) || key.length !== N) throw new RangeError(`MT19937 state needs ${N} key words`);
    if (!Number.isInteger(pos) || pos < 0 || pos > N)
      throw new RangeError(`MT19937 pos out of range: ${pos}`);
    const mt = new Uint32Array(N);
    for (let i = 0; i < N; i++) {
      if (!isUint32(key[i])) throw new RangeError(`MT19937 key word ${i} is not a uint32: ${key[i]}`);
      mt[i] = key[i];
    }
    return new MT19937(mt, pos);
  }

  getState(): MT19937State {
    return { key: Array.from(this.mt), pos: this.pos };
  }

  nextUint32(): number {
    if (this.pos >= N) this.twist();
    let y = this.mt[this.pos++];
    y ^= y >>> 11;
    y ^= (y << 7) & 0x9d2c5680;
    y ^= (y << 15) & 0xefc60000;
    y ^= y >>> 18;
    return y >>> 0;
  }

  /** 53-bit double from two outputs, as CPython `random()` and NumPy `random_sample()` build it. */
  nextDouble(): number {
    const a = this.nextUint32() >>> 5;
    const b = this.nextUint32() >>> 6;
    return (a * TWO_POW_26 + b) * TWO_POW_MINUS_53;
  }

  private twist(): void {
    const mt = this.mt;
    let kk = 0;
    let y: number;
    // `-(y & 1) & MATRIX_A` selects the twist constant without a branch.
    for (; kk < N - M; kk++) {
      y = (mt[kk] & UPPER_MASK) | (mt[kk + 1] & LOWER_MASK);
      mt[kk] = mt[kk + M] ^ (y >>> 1) ^ (-(y & 1) & MATRIX_A);
    }
    for (; kk < N - 1; kk++) {
      y = (mt[kk] & UPPER_MASK) | (mt[kk + 1] & LOWER_MASK);
      mt[kk] = mt[kk + (M - N)] ^ (y >>> 1) ^ (-(y & 1) & MATRIX_A);
    }
    y = (mt[N - 1] & UPPER_MASK) | (mt[0] & LOWER_MASK);
    mt[N - 1] = mt[M - 1] ^ (y >>> 1) ^ (-(y & 1) & MATRIX_A);
    this.pos = 0;
  }
}
