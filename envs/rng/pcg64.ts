// NumPy's PCG64 bit generator (128-bit LCG, XSL-RR output), seeded from a SeedSequence.
// The 128-bit state lives in four 32-bit words; 32x32-bit products are split exactly (mulHi32).

import { mulHi32 } from "./mul-hi.ts";
import { SeedSequence } from "./seed-sequence.ts";

const MASK128 = (1n << 128n) - 1n;
const MULT = 0x2360ed051fc65da44385df649fccf645n;
const TWO_POW_21 = 2097152;
const TWO_POW_MINUS_32 = 1 / 4294967296;
const TWO_POW_MINUS_53 = 1 / 9007199254740992;

function word(value: bigint, index: number): number {
  return Number((value >> BigInt(32 * index)) & 0xffffffffn);
}

const K0 = word(MULT, 0);
const K1 = word(MULT, 1);
const K2 = word(MULT, 2);
const K3 = word(MULT, 3);

/** Mirrors numpy's `bit_generator.state`: 128-bit values as decimal strings. */
export interface PCG64State {
  state: string;
  inc: string;
  hasUint32: number;
  uinteger: number;
}

function parseUint128(name: string, text: string): bigint {
  if (!/^[0-9]+$/.test(text)) throw new RangeError(`PCG64 ${name} must be a decimal string`);
  const value = BigInt(text);
  if (value > MASK128) throw new RangeError(`PCG64 ${name} exceeds 128 bits`);
  return value;
}

export class PCG64 {
  private s0 = 0;
  private s1 = 0;
  private s2 = 0;
  private s3 = 0;
  private i0 = 0;
  private i1 = 0;
  private i2 = 0;
  private i3 = 0;
  /** High word of the most recent 64-bit output. */
  private outHi = 0;
  private hasUint32 = false;
  private uinteger = 0;

  /** `PCG64(seed)`: a plain integer goes through `SeedSequence(seed)` first, as numpy does. */
  constructor(seed: SeedSequence | number | bigint) {
    const seq = seed instanceof SeedSequence ? seed : new SeedSequence(seed);
    // generate_state(4, uint64) = 8 uint32 words paired little-endian; numpy reads them as
    // initstate = v0:v1 and initseq = v2:v3 (high:low).
    const w = seq.generateState(8);
    const u64 = (k: number): bigint => (BigInt(w[2 * k + 1]) << 32n) | BigInt(w[2 * k]);
    const initState = (u64(0) << 64n) | u64(1);
    const initSeq = (u64(2) << 64n) | u64(3);
    const inc = ((initSeq << 1n) | 1n) & MASK128;
    let state = inc; // 0 * MULT + inc
    state = (state + initState) & MASK128;
    state = (state * MULT + inc) & MASK128;
    this.load(state, inc);
  }

  static fromState(state: PCG64State): PCG64 {
    if (state.hasUint32 !== 0 && state.hasUint32 !== 1) {
      throw new RangeError("PCG64 hasUint32 must be 0 or 1");
    }
    if (!Number.isInteger(state.uinteger) || state.uinteger < 0 || state.uinteger > 0xffffffff) {
      throw new RangeError("PCG64 uinteger must be a uint32");
    }
    // Seed 0 is a placeholder; every field is overwritten below.
    const gen = new PCG64(0);
    gen.load(parseUint128("state", state.state), parseUint128("inc", state.inc));
    gen.hasUint32 = state.hasUint32 === 1;
    gen.uinteger = state.uinteger;
    return gen;
  }

  getState(): PCG64State {
    const state =
      (BigInt(this.s3) << 96n) | (BigInt(this.s2) << 64n) | (BigInt(this.s1) << 32n) | BigInt(this.s0);
    const inc =
      (BigInt(this.i3) << 96n) | (BigInt(this.i2) << 64n) | (BigInt(this.i1) << 32n) | BigInt(this.i0);
    return {
      state: state.toString(),
      inc: inc.toString(),
      hasUint32: this.hasUint32 ? 1 : 0,
      uinteger: this.uinteger,
    };
  }

  /** Full 64-bit output (numpy's `next_uint64` / `random_raw`); leaves the uint32 buffer alone. */
  nextUint64(): bigint {
    const lo = this.step();
    return (BigInt(this.outHi) << 32n) | BigInt(lo);
  }

  /** Low half of a fresh 64-bit output first; the high half is kept for the next call. */
  nextUint32(): number {
    if (this.hasUint32) {
      this.hasUint32 = false;
      return this.uinteger;
    }
    const lo = this.step();
    this.hasUint32 = true;
    this.uinteger = this.outHi;
    return lo;
  }

  /** (u64 >> 11) * 2**-53; ignores and keeps the uint32 buffer. */
  nextDouble(): number {
    const lo = this.step();
    return (this.outHi * TWO_POW_21 + (lo >>> 11)) * TWO_POW_MINUS_53;
  }

  private load(state: bigint, inc: bigint): void {
    this.s0 = word(state, 0);
    this.s1 = word(state, 1);
    this.s2 = word(state, 2);
    this.s3 = word(state, 3);
    this.i0 = word(inc, 0);
    this.i1 = word(inc, 1);
    this.i2 = word(inc, 2);
    this.i3 = word(inc, 3);
  }

  /**
   * state = state * MULT + inc (mod 2**128), then XSL-RR of the new state. Returns the low
   * 32 bits of the output and leaves the high 32 in `outHi`.
   */
  private step(): number {
    const a0 = this.s0;
    const a1 = this.s1;
    const a2 = this.s2;
    const a3 = this.s3;
    // Partial products a_i * K_j with i + j < 3 need both words; i + j = 3 only the low word.
    const l00 = Math.imul(a0, K0) >>> 0;
    const l01 = Math.imul(a0, K1) >>> 0;
    const l10 = Math.imul(a1, K0) >>> 0;
    const l02 = Math.imul(a0, K2) >>> 0;
    const l11 = Math.imul(a1, K1) >>> 0;
    const l20 = Math.imul(a2, K0) >>> 0;
    // Column sums first and carries last keeps the serial dependency chain short.
    // Every sum stays below 2**36, exact in a double.
    const t0 = l00 + this.i0;
    const t1 = mulHi32(a0, K0, l00) + l01 + (l10 + this.i1);
    const t2 = mulHi32(a0, K1, l01) + mulHi32(a1, K0, l10) + (l02 + l11) + (l20 + this.i2);
    const t3 =
      mulHi32(a0, K2, l02) +
      mulHi32(a1, K1, l11) +
      (mulHi32(a2, K0, l20) + this.i3) +
      (Math.imul(a0, K3) + Math.imul(a1, K2) + (Math.imul(a2, K1) + Math.imul(a3, K0)));
    const r0 = t0 >>> 0;
    const u1 = (t0 - r0) * TWO_POW_MINUS_32 + t1;
    const r1 = u1 >>> 0;
    const u2 = (u1 - r1) * TWO_POW_MINUS_32 + t2;
    const r2 = u2 >>> 0;
    // Only the low word of the top column survives mod 2**128; t3 may be negative (imul).
    const r3 = ((u2 - r2) * TWO_POW_MINUS_32 + t3) >>> 0;
    this.s0 = r0;
    this.s1 = r1;
    this.s2 = r2;
    this.s3 = r3;

    // XSL-RR: (high64 ^ low64) rotated right by the top 6 state bits.
    let hi = (r3 ^ r1) >>> 0;
    let lo = (r2 ^ r0) >>> 0;
    const rot = r3 >>> 26;
    if (rot & 32) {
      const t = hi;
      hi = lo;
      lo = t;
    }
    const r = rot & 31;
    if (r !== 0) {
      const nextLo = ((lo >>> r) | (hi << (32 - r))) >>> 0;
      hi = ((hi >>> r) | (lo << (32 - r))) >>> 0;
      lo = nextLo;
    }
    this.outHi = hi;
    return lo;
  }
}
