// NumPy's PCG64 bit generator (128-bit LCG, XSL-RR output), seeded from a SeedSequence.
// The 128-bit state lives in eight 16-bit limbs so every partial product stays exact in a double.

import { SeedSequence } from "./seed-sequence.ts";

const MASK128 = (1n << 128n) - 1n;
const MULT = 0x2360ed051fc65da44385df649fccf645n;
const TWO_POW_21 = 2097152;
const TWO_POW_MINUS_53 = 1 / 9007199254740992;

function limb(value: bigint, index: number): number {
  return Number((value >> BigInt(16 * index)) & 0xffffn);
}

const M0 = limb(MULT, 0);
const M1 = limb(MULT, 1);
const M2 = limb(MULT, 2);
const M3 = limb(MULT, 3);
const M4 = limb(MULT, 4);
const M5 = limb(MULT, 5);
const M6 = limb(MULT, 6);
const M7 = limb(MULT, 7);

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
  private s4 = 0;
  private s5 = 0;
  private s6 = 0;
  private s7 = 0;
  private i0 = 0;
  private i1 = 0;
  private i2 = 0;
  private i3 = 0;
  private i4 = 0;
  private i5 = 0;
  private i6 = 0;
  private i7 = 0;
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
    const gen = new PCG64(0);
    gen.load(parseUint128("state", state.state), parseUint128("inc", state.inc));
    if (state.hasUint32 !== 0 && state.hasUint32 !== 1)
      throw new RangeError("PCG64 hasUint32 must be 0 or 1");
    if (!Number.isInteger(state.uinteger) || state.uinteger < 0 || state.uinteger > 0xffffffff) {
      throw new RangeError("PCG64 uinteger must be a uint32");
    }
    gen.hasUint32 = state.hasUint32 === 1;
    gen.uinteger = state.uinteger;
    return gen;
  }

  getState(): PCG64State {
    const state =
      (BigInt(this.s7) << 112n) |
      (BigInt(this.s6) << 96n) |
      (BigInt(this.s5) << 80n) |
      (BigInt(this.s4) << 64n) |
      (BigInt(this.s3) << 48n) |
      (BigInt(this.s2) << 32n) |
      (BigInt(this.s1) << 16n) |
      BigInt(this.s0);
    const inc =
      (BigInt(this.i7) << 112n) |
      (BigInt(this.i6) << 96n) |
      (BigInt(this.i5) << 80n) |
      (BigInt(this.i4) << 64n) |
      (BigInt(this.i3) << 48n) |
      (BigInt(this.i2) << 32n) |
      (BigInt(this.i1) << 16n) |
      BigInt(this.i0);
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
    this.s0 = limb(state, 0);
    this.s1 = limb(state, 1);
    this.s2 = limb(state, 2);
    this.s3 = limb(state, 3);
    this.s4 = limb(state, 4);
    this.s5 = limb(state, 5);
    this.s6 = limb(state, 6);
    this.s7 = limb(state, 7);
    this.i0 = limb(inc, 0);
    this.i1 = limb(inc, 1);
    this.i2 = limb(inc, 2);
    this.i3 = limb(inc, 3);
    this.i4 = limb(inc, 4);
    this.i5 = limb(inc, 5);
    this.i6 = limb(inc, 6);
    this.i7 = limb(inc, 7);
  }

  /**
   * state = state * MULT + inc (mod 2**128), then XSL-RR of the new state. Returns the low
   * 32 bits of the output and leaves the high 32 in `outHi`. Column sums stay below 2**36.
   */
  private step(): number {
    const a0 = this.s0;
    const a1 = this.s1;
    const a2 = this.s2;
    const a3 = this.s3;
    const a4 = this.s4;
    const a5 = this.s5;
    const a6 = this.s6;
    const a7 = this.s7;
    let c = a0 * M0 + this.i0;
    const b0 = c & 0xffff;
    c = (c - b0) / 65536 + a0 * M1 + a1 * M0 + this.i1;
    const b1 = c & 0xffff;
    c = (c - b1) / 65536 + a0 * M2 + a1 * M1 + a2 * M0 + this.i2;
    const b2 = c & 0xffff;
    c = (c - b2) / 65536 + a0 * M3 + a1 * M2 + a2 * M1 + a3 * M0 + this.i3;
    const b3 = c & 0xffff;
    c = (c - b3) / 65536 + a0 * M4 + a1 * M3 + a2 * M2 + a3 * M1 + a4 * M0 + this.i4;
    const b4 = c & 0xffff;
    c = (c - b4) / 65536 + a0 * M5 + a1 * M4 + a2 * M3 + a3 * M2 + a4 * M1 + a5 * M0 + this.i5;
    const b5 = c & 0xffff;
    c = (c - b5) / 65536 + a0 * M6 + a1 * M5 + a2 * M4 + a3 * M3 + a4 * M2 + a5 * M1 + a6 * M0 + this.i6;
    const b6 = c & 0xffff;
    c =
      (c - b6) / 65536 +
      a0 * M7 +
      a1 * M6 +
      a2 * M5 +
      a3 * M4 +
      a4 * M3 +
      a5 * M2 +
      a6 * M1 +
      a7 * M0 +
      this.i7;
    const b7 = c & 0xffff;
    this.s0 = b0;
    this.s1 = b1;
    this.s2 = b2;
    this.s3 = b3;
    this.s4 = b4;
    this.s5 = b5;
    this.s6 = b6;
    this.s7 = b7;

    // XSL-RR: (high64 ^ low64) rotated right by the top 6 state bits.
    let hi = (((b7 ^ b3) << 16) | (b6 ^ b2)) >>> 0;
    let lo = (((b5 ^ b1) << 16) | (b4 ^ b0)) >>> 0;
    const rot = b7 >>> 10;
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
