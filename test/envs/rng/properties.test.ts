import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { MT19937 } from "../../../envs/rng/mt19937.ts";
import { NumpyGenerator, PCG64, type PCG64State } from "../../../envs/rng/numpy-generator.ts";
import { NumpyRandomState } from "../../../envs/rng/numpy-random-state.ts";
import { PythonRandom } from "../../../envs/rng/python-random.ts";
import { range } from "./fixtures.ts";

const MASK64 = (1n << 64n) - 1n;
const MASK128 = (1n << 128n) - 1n;
const PCG_MULT = 0x2360ed051fc65da44385df649fccf645n;

/** Independent BigInt model of one PCG64 step: LCG then XSL-RR. */
function pcgReference(state: bigint, inc: bigint): { state: bigint; out: bigint } {
  const next = (state * PCG_MULT + inc) & MASK128;
  const x = ((next >> 64n) ^ next) & MASK64;
  const rot = next >> 122n;
  const out = ((x >> rot) | (x << ((64n - rot) & 63n))) & MASK64;
  return { state: next, out };
}

const seed32 = fc.integer({ min: 0, max: 0xffffffff });
const u128 = fc.bigInt({ min: 0n, max: MASK128 });
const bound = fc.integer({ min: -(2 ** 40), max: 2 ** 40 });

describe("properties", () => {
  it("PCG64's 32-bit word arithmetic equals a BigInt model from any state", () => {
    fc.assert(
      fc.property(u128, u128, (state, rawInc) => {
        const inc = rawInc | 1n;
        const gen = PCG64.fromState({
          state: state.toString(),
          inc: inc.toString(),
          hasUint32: 0,
          uinteger: 0,
        });
        let s = state;
        for (let i = 0; i < 4; i++) {
          const step = pcgReference(s, inc);
          s = step.state;
          expect(gen.nextUint64()).toBe(step.out);
        }
        expect(gen.getState().state).toBe(s.toString());
      }),
    );
  });

  it("PCG64 stays exact where a 32x32 double product rounds down across a power of two", () => {
    // Words w with w * K_j (K = multiplier words) at such a boundary; found by search.
    const traps = [13438519n, 430032571n, 31803765n, 508860227n, 67584349n, 1081349580n];
    for (const trap of traps) {
      for (const shift of [0n, 32n, 64n]) {
        const state = trap << shift;
        const inc = 0xda3e39cb94b95bdbn;
        const gen = PCG64.fromState({
          state: state.toString(),
          inc: inc.toString(),
          hasUint32: 0,
          uinteger: 0,
        });
        expect(gen.nextUint64(), `state ${trap} << ${shift}`).toBe(pcgReference(state, inc).out);
      }
    }
  });

  it("nextDouble is (u64 >> 11) * 2**-53", () => {
    fc.assert(
      fc.property(u128, (state) => {
        const init: PCG64State = { state: state.toString(), inc: "1", hasUint32: 0, uinteger: 0 };
        const word = PCG64.fromState(init).nextUint64();
        expect(PCG64.fromState(init).nextDouble()).toBe(Number(word >> 11n) / 2 ** 53);
      }),
    );
  });

  it("Generator.integers equals Lemire computed with BigInt on the same uint32 stream", () => {
    fc.assert(
      fc.property(u128, fc.integer({ min: 2, max: 0xffffffff }), (state, n) => {
        const init: PCG64State = { state: state.toString(), inc: "12345", hasUint32: 0, uinteger: 0 };
        const g = NumpyGenerator.fromState(init);
        const source = PCG64.fromState(init);
        const excl = BigInt(n);
        const threshold = (1n << 32n) % excl;
        for (let i = 0; i < 3; i++) {
          let m: bigint;
          do m = BigInt(source.nextUint32()) * excl;
          while ((m & 0xffffffffn) < threshold);
          expect(g.integers(n)).toBe(Number(m >> 32n));
        }
      }),
    );
  });

  it("bounded draws stay within bounds", () => {
    fc.assert(
      fc.property(seed32, bound, fc.integer({ min: 1, max: 2 ** 40 }), (seed, low, width) => {
        const high = low + width;
        const py = new PythonRandom(seed);
        const rs = new NumpyRandomState(seed);
        const g = new NumpyGenerator(seed);
        for (let i = 0; i < 5; i++) {
          const a = py.randint(low, high);
          expect(a >= low && a <= high && Number.isInteger(a)).toBe(true);
          const b = rs.randint(low, high);
          expect(b >= low && b < high && Number.isInteger(b)).toBe(true);
          const c = g.integers(low, high);
          expect(c >= low && c < high && Number.isInteger(c)).toBe(true);
        }
        const u = g.random();
        expect(u >= 0 && u < 1).toBe(true);
      }),
    );
  });

  it("PythonRandom.sample returns k distinct members in both of CPython's branches", () => {
    fc.assert(
      fc.property(seed32, fc.integer({ min: 0, max: 400 }), fc.nat(), (seed, n, kRaw) => {
        const k = n === 0 ? 0 : kRaw % (n + 1);
        const picked = new PythonRandom(seed).sample(range(n), k);
        expect(picked).toHaveLength(k);
        expect(new Set(picked).size).toBe(k);
        for (const x of picked) expect(x >= 0 && x < n).toBe(true);
      }),
    );
  });

  it("shuffle is a permutation", () => {
    fc.assert(
      fc.property(seed32, fc.integer({ min: 0, max: 60 }), (seed, n) => {
        const items = range(n);
        new PythonRandom(seed).shuffle(items);
        expect([...items].sort((a, b) => a - b)).toEqual(range(n));
      }),
    );
  });

  it("same seed gives the same stream; a JSON state snapshot resumes it", () => {
    fc.assert(
      fc.property(seed32, fc.integer({ min: 0, max: 1500 }), (seed, skip) => {
        const drawAll = (py: PythonRandom, rs: NumpyRandomState, g: NumpyGenerator): number[] => [
          ...range(20).map(() => py.randint(1, 6)),
          ...range(20).map(() => rs.randint(36)),
          ...range(20).map((i) => (i % 2 ? g.random() : g.integers(4))),
        ];
        const py = new PythonRandom(seed);
        const rs = new NumpyRandomState(seed);
        const g = new NumpyGenerator(seed);
        for (let i = 0; i < skip; i++) {
          py.random();
          rs.randint(7);
          g.integers(3);
        }
        const clone = <T>(x: T): T => JSON.parse(JSON.stringify(x)) as T;
        const py2 = PythonRandom.fromState(clone(py.getState()));
        const rs2 = NumpyRandomState.fromState(clone(rs.getState()));
        const g2 = NumpyGenerator.fromState(clone(g.getState()));
        expect(drawAll(py2, rs2, g2)).toEqual(drawAll(py, rs, g));

        const fresh = (): number[] =>
          drawAll(new PythonRandom(seed), new NumpyRandomState(seed), new NumpyGenerator(seed));
        expect(fresh()).toEqual(fresh());
      }),
      { numRuns: 50 },
    );
  });

  it("different seeds give different MT19937 streams", () => {
    fc.assert(
      fc.property(seed32, seed32, (a, b) => {
        fc.pre(a !== b);
        const x = MT19937.fromSeed(a);
        const y = MT19937.fromSeed(b);
        const xs = range(4).map(() => x.nextUint32());
        const ys = range(4).map(() => y.nextUint32());
        expect(xs).not.toEqual(ys);
      }),
    );
  });
});
