// `np.random.Generator(PCG64(SeedSequence(seed)))`, as gymnasium's `seeding.np_random(seed)`
// builds it. Integers default to int64: 32-bit ranges use Lemire on buffered uint32 halves.

import { integerSpan } from "./bounds.ts";
import { mulHi32 } from "./mul-hi.ts";
import { PCG64, type PCG64State } from "./pcg64.ts";
import { SeedSequence } from "./seed-sequence.ts";

export { PCG64, type PCG64State } from "./pcg64.ts";
export { SeedSequence } from "./seed-sequence.ts";

const TWO_POW_32 = 4294967296;
const TWO_POW_64 = 1n << 64n;
const MASK64 = TWO_POW_64 - 1n;
/** `sqrt(finfo(float64).eps)`: numpy's tolerance for `sum(p) == 1`. */
const P_SUM_ATOL = Math.sqrt(2 ** -52);

export type NumpyGeneratorState = PCG64State;

export class NumpyGenerator {
  readonly bitGenerator: PCG64;

  constructor(seed: number | bigint | PCG64) {
    if (seed instanceof PCG64) {
      this.bitGenerator = seed;
      return;
    }
    if (typeof seed === "number" && !Number.isInteger(seed)) {
      throw new RangeError(`Generator seed must be an integer, got ${seed}`);
    }
    if (seed < 0) throw new RangeError(`Generator seed must be >= 0, got ${seed}`);
    this.bitGenerator = new PCG64(new SeedSequence(seed));
  }

  static fromState(state: NumpyGeneratorState): NumpyGenerator {
    return new NumpyGenerator(PCG64.fromState(state));
  }

  getState(): NumpyGeneratorState {
    return this.bitGenerator.getState();
  }

  random(): number {
    return this.bitGenerator.nextDouble();
  }

  /**
   * `integers(low, high)` in [low, high), `integers(n)` in [0, n). A one-value range draws
   * nothing; `size=k` is exactly k scalar calls (the int64 fill keeps no buffer of its own).
   */
  integers(low: number, high?: number): number {
    const { low: start, span: rng } = integerSpan("integers", low, high);
    if (rng === 0) return start;
    if (rng < 0xffffffff) return start + this.lemire32(rng + 1);
    if (rng === 0xffffffff) return start + this.bitGenerator.nextUint32();
    if (!Number.isSafeInteger(rng)) throw new RangeError(`integers range too wide: ${start}, ${high}`);
    return start + this.lemire64(BigInt(rng) + 1n);
  }

  /** `integers(low, high, size=count)` as a flat array. */
  integersArray(low: number, high: number | undefined, count: number): number[] {
    checkCount(count);
    const out = new Array<number>(count);
    for (let i = 0; i < count; i++) out[i] = this.integers(low, high);
    return out;
  }

  /**
   * `choice(options, size, p=p)` with replacement, flattened in row-major order. `size` is an
   * output count or a shape such as [rows, cols]. Without `p` it is `integers(0, n)` per cell.
   */
  choice<T>(options: readonly T[], size: number | readonly number[], p?: readonly number[]): T[] {
    const count = typeof size === "number" ? size : size.reduce((a, b) => a * b, 1);
    checkCount(count);
    const n = options.length;
    if (n === 0 && count !== 0) throw new RangeError("a cannot be empty unless no samples are taken");
    const out = new Array<T>(count);
    if (p === undefined) {
      for (let i = 0; i < count; i++) out[i] = options[this.integers(0, n)];
      return out;
    }
    const cdf = probabilityCdf(p, n);
    for (let i = 0; i < count; i++) out[i] = options[searchRight(cdf, this.random())];
    return out;
  }

  private lemire32(rangeExcl: number): number {
    const bg = this.bitGenerator;
    let u = bg.nextUint32();
    let leftover = Math.imul(u, rangeExcl) >>> 0;
    if (leftover < rangeExcl) {
      const threshold = TWO_POW_32 % rangeExcl;
      while (leftover < threshold) {
        u = bg.nextUint32();
        leftover = Math.imul(u, rangeExcl) >>> 0;
      }
    }
    return mulHi32(u, rangeExcl, leftover);
  }

  private lemire64(rangeExcl: bigint): number {
    const bg = this.bitGenerator;
    let m = bg.nextUint64() * rangeExcl;
    let leftover = m & MASK64;
    if (leftover < rangeExcl) {
      const threshold = (TWO_POW_64 - rangeExcl) % rangeExcl;
      while (leftover < threshold) {
        m = bg.nextUint64() * rangeExcl;
        leftover = m & MASK64;
      }
    }
    return Number(m >> 64n);
  }
}

function checkCount(count: number): void {
  if (!Number.isSafeInteger(count) || count < 0) throw new RangeError(`size must be >= 0, got ${count}`);
}

/** numpy's checks (Kahan sum within sqrt(eps) of 1), then cumsum / cumsum[-1] in float64. */
function probabilityCdf(p: readonly number[], n: number): Float64Array {
  if (p.length !== n) throw new RangeError("a and p must have same size");
  let sum = p[0];
  let comp = 0;
  for (let i = 1; i < n; i++) {
    const y = p[i] - comp;
    const t = sum + y;
    comp = t - sum - y;
    sum = t;
  }
  if (Number.isNaN(sum)) throw new RangeError("Probabilities contain NaN");
  for (let i = 0; i < n; i++) {
    if (p[i] < 0) throw new RangeError("Probabilities are not non-negative");
  }
  if (!(Math.abs(sum - 1) <= P_SUM_ATOL)) {
    throw new RangeError("Probabilities do not sum to 1");
  }
  const cdf = new Float64Array(n);
  let acc = 0;
  for (let i = 0; i < n; i++) {
    acc += p[i];
    cdf[i] = acc;
  }
  const last = cdf[n - 1];
  for (let i = 0; i < n; i++) cdf[i] /= last;
  return cdf;
}

/** `searchsorted(cdf, u, side="right")`: the number of entries <= u. */
function searchRight(cdf: Float64Array, u: number): number {
  let lo = 0;
  let hi = cdf.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (cdf[mid] <= u) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
