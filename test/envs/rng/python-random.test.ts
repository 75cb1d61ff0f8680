import { describe, expect, it } from "vitest";
import { PythonRandom, type PythonRandomState } from "../../../envs/rng/python-random.ts";
import { loadFixture, range, seedValue } from "./fixtures.ts";

interface Block {
  op: string;
  args: number[];
  out: unknown[];
}

interface Case {
  seed: string;
  blocks: Block[];
  mixed: [string, ...unknown[]][];
  state: PythonRandomState;
}

const fixture = loadFixture<{ cases: Case[] }>("python-random.json");

function call(r: PythonRandom, op: string, args: number[]): unknown {
  switch (op) {
    case "random":
      return r.random();
    case "getrandbits":
      return r.getrandbits(args[0]);
    case "randbelow":
      return r.randbelow(args[0]);
    case "randrange":
      return args.length === 1 ? r.randrange(args[0]) : r.randrange(args[0], args[1]);
    case "randint":
      return r.randint(args[0], args[1]);
    case "choice":
      return r.choice(range(args[0]));
    case "sample":
      return r.sample(range(args[0]), args[1]);
    case "shuffle": {
      const items = range(args[0]);
      r.shuffle(items);
      return items;
    }
  }
  throw new Error(`unknown op ${op}`);
}

describe.each(fixture.cases)("PythonRandom(seed=$seed) vs CPython 3.11", ({ seed, blocks, mixed, state }) => {
  it("matches every block of calls, then CPython's getstate()", () => {
    const r = new PythonRandom(seedValue(seed));
    for (const [i, { op, args, out }] of blocks.entries()) {
      const got = out.map(() => call(r, op, args));
      expect(got, `block ${i}: ${op}(${args.join(", ")})`).toEqual(out);
    }
    // Mixed program continues the same generator.
    for (const [i, entry] of mixed.entries()) {
      const [op, ...rest] = entry;
      const expected = rest.pop();
      expect(call(r, op, rest as number[]), `mixed ${i}: ${op}(${rest.join(", ")})`).toEqual(expected);
    }
    expect(r.getState()).toEqual(state);
  });

  it("seeds identically from number and bigint forms", () => {
    const big = BigInt(seed);
    const fromBig = new PythonRandom(big);
    const expected = blocks[0].out.slice(0, 20);
    expect(expected.map(() => fromBig.random())).toEqual(expected);
    if (Number.isSafeInteger(Number(big))) {
      const fromNum = new PythonRandom(Number(big));
      expect(expected.map(() => fromNum.random())).toEqual(expected);
    }
  });
});

describe("PythonRandom seeding details", () => {
  it("uses |seed| (random.seed(-5) == random.seed(5))", () => {
    const a = new PythonRandom(-5);
    const b = new PythonRandom(5);
    const c = new PythonRandom(-5n);
    for (let i = 0; i < 50; i++) {
      const x = a.random();
      expect(b.random()).toBe(x);
      expect(c.random()).toBe(x);
    }
  });

  it("accepts an exact non-safe integer number the same as its bigint", () => {
    const a = new PythonRandom(2 ** 64);
    const b = new PythonRandom(2n ** 64n);
    for (let i = 0; i < 20; i++) expect(a.getrandbits(32)).toBe(b.getrandbits(32));
  });

  it("rejects non-integer seeds and bad arguments", () => {
    expect(() => new PythonRandom(1.5)).toThrow(RangeError);
    expect(() => new PythonRandom(Number.NaN)).toThrow(RangeError);
    const r = new PythonRandom(1);
    expect(() => r.randbelow(0)).toThrow(RangeError);
    expect(() => r.randrange(0)).toThrow(RangeError);
    expect(() => r.randrange(5, 5)).toThrow(RangeError);
    expect(() => r.randint(3, 2)).toThrow(RangeError);
    expect(() => r.choice([])).toThrow(RangeError);
    expect(() => r.sample([1, 2], 3)).toThrow(RangeError);
    expect(() => r.sample([1, 2], -1)).toThrow(RangeError);
    expect(() => r.getrandbits(54)).toThrow(RangeError);
  });

  it("state snapshots resume the stream", () => {
    const r = new PythonRandom(2024);
    r.sample(range(10), 3);
    const snapshot = JSON.parse(JSON.stringify(r.getState())) as PythonRandomState;
    const expected = range(30).map(() => r.randint(1, 6));
    const resumed = PythonRandom.fromState(snapshot);
    expect(range(30).map(() => resumed.randint(1, 6))).toEqual(expected);
  });
});
