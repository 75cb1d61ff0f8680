import { describe, expect, it } from "vitest";
import { MT19937, type MT19937State } from "../../../envs/rng/mt19937.ts";
import { loadFixture } from "./fixtures.ts";

interface Fixture {
  genrand: { seed: number; out: number[] }[];
  byArray: { key: number[]; out: number[]; state: MT19937State }[];
  states: { seed: number; draws: number; key: number[]; pos: number }[];
}

const fixture = loadFixture<Fixture>("mt19937.json");

function draw(mt: MT19937, count: number): number[] {
  const out = new Array<number>(count);
  for (let i = 0; i < count; i++) out[i] = mt.nextUint32();
  return out;
}

describe("MT19937 init_genrand (numpy RandomState seeding)", () => {
  it.each(fixture.genrand)("seed $seed matches numpy's raw uint32 stream", ({ seed, out }) => {
    expect(draw(MT19937.fromSeed(seed), out.length)).toEqual(out);
  });

  it.each(fixture.states)(
    "seed $seed after $draws draws has numpy's key/pos",
    ({ seed, draws, key, pos }) => {
      const mt = MT19937.fromSeed(seed);
      draw(mt, draws);
      expect(mt.getState()).toEqual({ key, pos });
    },
  );
});

describe("MT19937 init_by_array (CPython random.seed)", () => {
  it.each(fixture.byArray.map((c) => ({ ...c, len: c.key.length })))(
    "key of $len words matches CPython getrandbits(32) and getstate()",
    ({ key, out, state }) => {
      const mt = MT19937.fromKey(key);
      expect(draw(mt, out.length)).toEqual(out);
      expect(mt.getState()).toEqual(state);
    },
  );

  it("accepts a typed array key", () => {
    const { key, out } = fixture.byArray[3];
    expect(draw(MT19937.fromKey(Uint32Array.from(key)), 10)).toEqual(out.slice(0, 10));
  });
});

describe("MT19937 state", () => {
  it("round-trips through JSON and continues the same stream at every position", () => {
    const original = MT19937.fromSeed(99);
    for (const step of [0, 1, 622, 1, 1, 700]) {
      draw(original, step);
      const copy = MT19937.fromState(JSON.parse(JSON.stringify(original.getState())) as MT19937State);
      expect(draw(copy, 1300)).toEqual(draw(MT19937.fromState(original.getState()), 1300));
    }
    const fresh = MT19937.fromSeed(99);
    const restored = MT19937.fromState(fresh.getState());
    expect(draw(restored, 50)).toEqual(draw(MT19937.fromSeed(99), 50));
  });

  it("nextDouble is the 53-bit construction from two outputs", () => {
    const a = MT19937.fromSeed(5);
    const b = MT19937.fromSeed(5);
    for (let i = 0; i < 100; i++) {
      const x = b.nextUint32() >>> 5;
      const y = b.nextUint32() >>> 6;
      expect(a.nextDouble()).toBe((x * 67108864 + y) / 9007199254740992);
    }
  });

  it("rejects bad seeds, keys and states", () => {
    for (const seed of [-1, 2 ** 32, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => MT19937.fromSeed(seed)).toThrow(RangeError);
    }
    expect(() => MT19937.fromKey([])).toThrow(RangeError);
    expect(() => MT19937.fromKey([2 ** 32])).toThrow(RangeError);
    const state = MT19937.fromSeed(1).getState();
    expect(() => MT19937.fromState({ ...state, pos: 625 })).toThrow(RangeError);
    expect(() => MT19937.fromState({ ...state, key: state.key.slice(1) })).toThrow(RangeError);
  });
});
