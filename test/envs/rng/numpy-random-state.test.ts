import { describe, expect, it } from "vitest";
import {
  MAX_RANDOM_STATE_SEED,
  NumpyRandomState,
  type NumpyRandomStateState,
} from "../../../envs/rng/numpy-random-state.ts";
import { MAX_SEED } from "../../../protocol/seeds.ts";
import { loadFixture } from "./fixtures.ts";

interface Case {
  seed: number;
  blocks: { op: string; args: number[]; out: number[] }[];
  mixed: [string, ...number[]][];
  state: NumpyRandomStateState;
}

const fixture = loadFixture<{ cases: Case[] }>("numpy-random-state.json");

function call(rs: NumpyRandomState, op: string, args: number[]): number {
  switch (op) {
    case "randomSample":
      return rs.randomSample();
    case "randint":
      return args.length === 1 ? rs.randint(args[0]) : rs.randint(args[0], args[1]);
    case "choice":
      return rs.choice(args[0]);
  }
  throw new Error(`unknown op ${op}`);
}

describe.each(fixture.cases)(
  "NumpyRandomState($seed) vs numpy legacy RandomState",
  ({ seed, blocks, mixed, state }) => {
    it("matches every block and mixed call, then numpy's get_state()", () => {
      const rs = new NumpyRandomState(seed);
      for (const [i, { op, args, out }] of blocks.entries()) {
        expect(
          out.map(() => call(rs, op, args)),
          `block ${i}: ${op}(${args.join(", ")})`,
        ).toEqual(out);
      }
      for (const [i, entry] of mixed.entries()) {
        const [op, ...rest] = entry;
        const expected = rest.pop();
        expect(call(rs, op, rest), `mixed ${i}: ${op}(${rest.join(", ")})`).toBe(expected);
      }
      expect(rs.getState()).toEqual(state);
    });
  },
);

describe("NumpyRandomState details", () => {
  it("randint over a single value draws nothing", () => {
    const a = new NumpyRandomState(7);
    const b = new NumpyRandomState(7);
    expect(a.randint(1)).toBe(0);
    expect(a.randint(5, 6)).toBe(5);
    expect(a.choice(1)).toBe(0);
    expect(a.randomSample()).toBe(b.randomSample());
  });

  it("rejects seeds numpy rejects", () => {
    for (const seed of [-1, 2 ** 32, 0.5, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => new NumpyRandomState(seed)).toThrow(RangeError);
    }
    expect(() => new NumpyRandomState(2 ** 32 - 1)).not.toThrow();
  });

  it("takes every seed the wire carries: its largest is the protocol's MAX_SEED", () => {
    expect(MAX_RANDOM_STATE_SEED).toBe(MAX_SEED);
    expect(() => new NumpyRandomState(MAX_SEED)).not.toThrow();
    expect(() => new NumpyRandomState(MAX_SEED + 1)).toThrow(RangeError);
  });

  it("rejects empty ranges", () => {
    const rs = new NumpyRandomState(0);
    expect(() => rs.randint(0)).toThrow(RangeError);
    expect(() => rs.randint(3, 3)).toThrow(RangeError);
    expect(() => rs.randint(1.5)).toThrow(RangeError);
    expect(() => rs.choice(0)).toThrow(RangeError);
  });

  it("state snapshots resume the stream", () => {
    const rs = new NumpyRandomState(11);
    for (let i = 0; i < 700; i++) rs.randint(36);
    const snapshot = JSON.parse(JSON.stringify(rs.getState())) as NumpyRandomStateState;
    const expected = Array.from({ length: 800 }, () => rs.randint(-3, 2 ** 40));
    const resumed = NumpyRandomState.fromState(snapshot);
    expect(Array.from({ length: 800 }, () => resumed.randint(-3, 2 ** 40))).toEqual(expected);
  });
});
