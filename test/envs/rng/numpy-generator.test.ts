import { describe, expect, it } from "vitest";
import {
  NumpyGenerator,
  type NumpyGeneratorState,
  PCG64,
  type PCG64State,
  SeedSequence,
} from "../../../envs/rng/numpy-generator.ts";
import { loadFixture, range, seedValue } from "./fixtures.ts";

interface SeedSequenceFixture {
  short: { entropy: string; words: number[]; pcg64: PCG64State }[];
  long: { entropy: string; words: number[] }[];
}

interface GeneratorCase {
  seed: string;
  initial: PCG64State;
  raw: string[];
  blocks: { op: string; args: unknown[]; out: unknown[] }[];
  mixed: unknown[][];
  state: PCG64State;
}

const seedFixture = loadFixture<SeedSequenceFixture>("seed-sequence.json");
interface CraftedCase {
  state: PCG64State;
  op: string;
  args: unknown[];
  out: unknown;
  u64: string;
}

const genFixture = loadFixture<{ cases: GeneratorCase[]; crafted: CraftedCase[] }>("numpy-generator.json");

function call(g: NumpyGenerator, op: string, args: unknown[]): unknown {
  const n = args as number[];
  switch (op) {
    case "random":
      return g.random();
    case "integers":
      return n.length === 1 ? g.integers(n[0]) : g.integers(n[0], n[1]);
    case "integersArray":
      return g.integersArray(n[0], n[1], n[2]);
    case "integersSize":
      // numpy integers(n, size=count)
      return g.integersArray(n[0], undefined, n[1]);
    case "choiceP": {
      const [count, shape, p] = args as [number, number[], number[]];
      return g.choice(range(count), shape, p);
    }
    case "choice":
      return g.choice(range(n[0]), n[1]);
  }
  throw new Error(`unknown op ${op}`);
}

describe("SeedSequence vs numpy", () => {
  it(`generate_state(8) and PCG64 seeding for ${seedFixture.short.length} entropies`, () => {
    for (const { entropy, words, pcg64 } of seedFixture.short) {
      const seq = new SeedSequence(BigInt(entropy));
      expect(Array.from(seq.generateState(8)), `entropy ${entropy}`).toEqual(words);
      expect(new PCG64(seq).getState(), `PCG64 state for entropy ${entropy}`).toEqual(pcg64);
    }
  });

  it.each(seedFixture.long)("generate_state(3000) for entropy $entropy", ({ entropy, words }) => {
    expect(Array.from(new SeedSequence(seedValue(entropy)).generateState(words.length))).toEqual(words);
  });

  it("treats number and bigint entropy alike and rejects negatives", () => {
    expect(new SeedSequence(123).generateState(4)).toEqual(new SeedSequence(123n).generateState(4));
    expect(() => new SeedSequence(-1)).toThrow(RangeError);
    expect(() => new SeedSequence(-1n)).toThrow(RangeError);
    expect(() => new SeedSequence(0.5)).toThrow(RangeError);
  });
});

describe.each(genFixture.cases)("NumpyGenerator(seed=$seed) vs numpy Generator(PCG64)", (c) => {
  it("seeds PCG64 and produces numpy's raw uint64 stream", () => {
    const bitgen = new PCG64(seedValue(c.seed));
    expect(bitgen.getState()).toEqual(c.initial);
    expect(c.raw.map(() => bitgen.nextUint64().toString())).toEqual(c.raw);
  });

  it("matches every block, the mixed program (incl. has_uint32 after each call) and the final state", () => {
    const g = new NumpyGenerator(seedValue(c.seed));
    expect(g.getState()).toEqual(c.initial);
    for (const [i, { op, args, out }] of c.blocks.entries()) {
      expect(
        out.map(() => call(g, op, args)),
        `block ${i}: ${op}(${JSON.stringify(args)})`,
      ).toEqual(out);
    }
    for (const [i, entry] of c.mixed.entries()) {
      const [op, ...rest] = entry as [string, ...unknown[]];
      const hasUint32 = rest.pop();
      const expected = rest.pop();
      const label = `mixed ${i}: ${op}(${JSON.stringify(rest)})`;
      expect(call(g, op, rest), label).toEqual(expected);
      expect(g.getState().hasUint32, `${label} has_uint32`).toBe(hasUint32);
    }
    expect(g.getState()).toEqual(c.state);
  });
});

describe("NumpyGenerator on crafted states (exact cdf ties, p normalisation, Lemire rounding)", () => {
  it.each(genFixture.crafted)("next output $u64: $op($args) = $out", ({ state, op, args, out, u64 }) => {
    expect(PCG64.fromState(state).nextUint64().toString()).toBe(u64);
    expect(call(NumpyGenerator.fromState(state), op, args)).toEqual(out);
  });
});

describe("PCG64 uint32 buffering", () => {
  it("serves the low half, then the buffered high half, across other draws", () => {
    const reference = new PCG64(0);
    const first = reference.nextUint64();
    const second = reference.nextUint64();

    const bitgen = new PCG64(0);
    expect(bitgen.nextUint32()).toBe(Number(first & 0xffffffffn));
    // A 64-bit draw or a double neither uses nor clears the buffered half.
    expect(bitgen.nextUint64()).toBe(second);
    expect(bitgen.nextUint32()).toBe(Number(first >> 32n));
    expect(bitgen.getState().hasUint32).toBe(0);
  });

  it("integers(4, size=2) from a fresh generator uses both halves of one draw", () => {
    const reference = new PCG64(123);
    const word = reference.nextUint64();
    const g = new NumpyGenerator(123);
    const pair = g.integersArray(4, undefined, 2);
    // Lemire with range 4: the top two bits of each 32-bit half.
    expect(pair).toEqual([Number((word & 0xffffffffn) >> 30n), Number(word >> 62n)]);
    // numpy leaves the consumed half in `uinteger`; only the flag is cleared.
    expect(g.getState()).toEqual({ ...reference.getState(), uinteger: Number(word >> 32n) });
  });

  it("integers over a single value draws nothing", () => {
    const g = new NumpyGenerator(5);
    const before = g.getState();
    expect(g.integers(1)).toBe(0);
    expect(g.integers(-4, -3)).toBe(-4);
    expect(g.integersArray(1, undefined, 3)).toEqual([0, 0, 0]);
    expect(g.getState()).toEqual(before);
  });

  it("state snapshots (with a buffered half) resume the stream", () => {
    const g = new NumpyGenerator(77);
    g.integers(6);
    const snapshot = JSON.parse(JSON.stringify(g.getState())) as NumpyGeneratorState;
    expect(snapshot.hasUint32).toBe(1);
    const expected = range(50).map((i) => (i % 3 === 0 ? g.random() : g.integers(i + 2)));
    const resumed = NumpyGenerator.fromState(snapshot);
    expect(range(50).map((i) => (i % 3 === 0 ? resumed.random() : resumed.integers(i + 2)))).toEqual(
      expected,
    );
  });
});

describe("NumpyGenerator argument checks", () => {
  it("rejects what numpy/gymnasium reject", () => {
    expect(() => new NumpyGenerator(-1)).toThrow(RangeError);
    expect(() => new NumpyGenerator(1.5)).toThrow(RangeError);
    const g = new NumpyGenerator(0);
    expect(() => g.integers(0)).toThrow(RangeError);
    expect(() => g.integers(2, 1)).toThrow(RangeError);
    expect(() => g.choice(["F", "H"], 4, [0.5])).toThrow(RangeError);
    expect(() => g.choice(["F", "H"], 4, [0.5, 0.6])).toThrow(RangeError);
    expect(() => g.choice(["F", "H"], 4, [1.5, -0.5])).toThrow(RangeError);
    expect(() => g.choice(["F", "H"], 4, [Number.NaN, 1])).toThrow(RangeError);
    expect(() => g.choice([], 1)).toThrow(RangeError);
    expect(() => PCG64.fromState({ ...g.getState(), hasUint32: 2 })).toThrow(RangeError);
  });

  it("accepts p within numpy's sqrt(eps) tolerance", () => {
    const g = new NumpyGenerator(0);
    expect(g.choice(["a", "b"], 3, [0.5, 0.5 + 1e-9])).toHaveLength(3);
    expect(() => g.choice(["a", "b"], 3, [0.5, 0.5 + 1e-7])).toThrow(RangeError);
  });

  it("choice with a shape returns the cells flattened row-major", () => {
    const a = new NumpyGenerator(9);
    const b = new NumpyGenerator(9);
    expect(a.choice(["F", "H"], [3, 4], [0.8, 0.2])).toEqual(b.choice(["F", "H"], 12, [0.8, 0.2]));
  });
});
