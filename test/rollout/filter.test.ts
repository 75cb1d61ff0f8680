import { readFileSync } from "node:fs";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { FilterMetric } from "../../protocol/settings.ts";
import {
  DEFAULT_FILTER,
  FilterInputError,
  filterMetrics,
  groupScores,
  groupStats,
  runGroupFilter,
  type SelectOptions,
  selectGroups,
  selectGroupsRanked,
  softmaxF32,
} from "../../src/rollout/filter.ts";

const f32 = Math.fround;
const F32 = (xs: number[]): Float32Array => Float32Array.from(xs);
const linear = (value: number, extra: Partial<SelectOptions> = {}): SelectOptions => ({
  strategy: "top_p",
  value,
  top_p_mode: "linear",
  type: "largest",
  include_zero: true,
  selection_eps: 0.01,
  ...extra,
});
const opts = (
  strategy: SelectOptions["strategy"],
  value: number,
  extra: Partial<SelectOptions> = {},
): SelectOptions => linear(value, { strategy, ...extra });

describe("selectGroups: linear top_p (facts §4.3 / RAGEN tests)", () => {
  it("[4,3,2,1] p 0.6 keeps 0 and 1 (threshold 5.99)", () => {
    expect(selectGroups(F32([4, 3, 2, 1]), linear(0.6))).toEqual([0, 1]);
  });
  it("[3,1,1,0] p 0.9 include_zero false keeps 0,1,2 (threshold 4.49)", () => {
    expect(selectGroups(F32([3, 1, 1, 0]), linear(0.9, { include_zero: false }))).toEqual([0, 1, 2]);
  });
  it("[10,1,0,0] p 0.9 keeps [0]", () => {
    expect(selectGroups(F32([10, 1, 0, 0]), linear(0.9))).toEqual([0]);
    expect(selectGroups(F32([10, 1, 0, 0]), linear(0.9, { include_zero: false }))).toEqual([0]);
    expect(selectGroups(F32([4, 2, 0, 0]), linear(0.9, { include_zero: false }))).toEqual([0, 1]);
  });
  it("all-zero scores keep nothing even with include_zero", () => {
    expect(selectGroups(F32([0, 0, 0]), linear(0.9))).toEqual([]);
    expect(selectGroups(F32([0, 0, 0]), linear(0.9, { include_zero: false }))).toEqual([]);
  });
  it("value >= 1 keeps every (non-zero-filtered) group", () => {
    expect(selectGroups(F32([4, 2, 0, 0]), linear(1))).toEqual([0, 1, 2, 3]);
    expect(selectGroups(F32([0, 0, 0]), linear(1))).toEqual([0, 1, 2]);
    expect(selectGroups(F32([1, 3, 2]), linear(1.5))).toEqual([0, 1, 2]);
    expect(selectGroups(F32([4, 0, 2]), linear(1, { include_zero: false }))).toEqual([0, 2]);
  });
  it("smallest walks up from the lowest score and stops at a score <= 0", () => {
    // ascending 1,2,3: threshold 0.5*10-0.01 = 4.99 is reached after 1+2+3
    expect(selectGroups(F32([1, 2, 3, 4]), linear(0.5, { type: "smallest" }))).toEqual([0, 1, 2]);
    // a zero comes first: nothing
    expect(selectGroups(F32([0, 2, 3]), linear(0.5, { type: "smallest" }))).toEqual([]);
    // without zeros: threshold 2.49, 2 < 2.49 so 3 is needed too
    expect(selectGroups(F32([0, 2, 3]), linear(0.5, { type: "smallest", include_zero: false }))).toEqual([
      1, 2,
    ]);
  });
  it("p 0 keeps nothing; negative scores lower the mass", () => {
    expect(selectGroups(F32([3, 2, 1]), linear(0))).toEqual([]);
    // sum 4, threshold 1.99: the 3 alone reaches it
    expect(selectGroups(F32([-1, 2, 3]), linear(0.5))).toEqual([2]);
    // sum -3, threshold negative: the empty prefix already reaches it
    expect(selectGroups(F32([-1, -2]), linear(0.5))).toEqual([]);
  });
  it("uses float32 tensor arithmetic, not doubles (cases checked with torch)", () => {
    // A double computation would keep [0,1,2]: threshold 0.9f*4 = 3.6000001 and 3.0+0.6f rounds up to it.
    expect(selectGroups(F32([3.0, 0.4, 0.6]), linear(0.9, { selection_eps: 0 }))).toEqual([0, 2]);
    expect(selectGroups(F32([0.7, 0.6, 1.5, 0.2]), linear(0.5, { selection_eps: 0 }))).toEqual([2]);
    expect(selectGroups(F32([1.2, 0.4, 0.6, 1.8]), linear(0.9, { selection_eps: 0 }))).toEqual([0, 2, 3]);
    // The running sum is a double rounded to float32 at each comparison: 2.1f+1.4f reaches the threshold.
    expect(selectGroups(F32([0.2, 2.1, 1.3, 1.4]), linear(0.7, { selection_eps: 0 }))).toEqual([1, 3]);
  });
  it("ties broken by group index", () => {
    expect(selectGroups(F32([2, 2, 2]), linear(0.5))).toEqual([0, 1]);
    expect(selectGroups(F32([1, 2, 1, 2]), linear(0.3))).toEqual([1]);
    expect(selectGroups(F32([1, 2, 1, 2]), linear(0.5, { type: "smallest" }))).toEqual([0, 1, 2]);
  });
});

describe("selectGroups: softmax top_p", () => {
  const sm = (value: number, extra: Partial<SelectOptions> = {}): SelectOptions =>
    linear(value, { top_p_mode: "softmax", ...extra });
  it("RAGEN's own examples", () => {
    expect(selectGroups(F32([1, 1, 1]), sm(0.6))).toEqual([0, 1]);
    expect(selectGroups(F32([10, 1, 0, 0]), sm(0.9, { include_zero: false }))).toEqual([0]);
    expect(selectGroups(F32([4, 2, 0, 0]), sm(0.9, { include_zero: false }))).toEqual([0, 1]);
    expect(selectGroups(F32([1, 1, 1, 0]), sm(0.6, { include_zero: false }))).toEqual([0, 1]);
  });
  it("hand-computed probabilities", () => {
    // softmax([2,0,0]) = [0.787, 0.107, 0.107]
    expect(selectGroups(F32([2, 0, 0]), sm(0.5))).toEqual([0]);
    expect(selectGroups(F32([2, 0, 0]), sm(0.85))).toEqual([0, 1]);
    expect(selectGroups(F32([2, 0, 0]), sm(0.9))).toEqual([0, 1, 2]);
    // smallest: softmax([-2,0,-1]) = [0.090, 0.665, 0.245]
    expect(selectGroups(F32([2, 0, 1]), sm(0.5, { type: "smallest" }))).toEqual([1]);
    expect(selectGroups(F32([2, 0, 1]), sm(0.8, { type: "smallest" }))).toEqual([1, 2]);
    // always at least one group
    expect(selectGroups(F32([0.3, 0.1]), sm(0))).toEqual([0]);
    // near-uniform for small scores: about `value` of the groups survive
    expect(selectGroups(F32([0.5, 0.4, 0.5, 0.45, 0.4, 0.5, 0.42, 0.48, 0.5, 0.41]), sm(0.5)).length).toBe(5);
  });
  it("softmaxF32 matches torch.softmax bits", () => {
    // torch.softmax(torch.tensor([1., 2., 3.]), 0)
    expect(Array.from(softmaxF32([1, 2, 3]))).toEqual([
      0.09003057330846786, 0.2447284758090973, 0.6652409434318542,
    ]);
    expect(Array.from(softmaxF32([0, 0]))).toEqual([0.5, 0.5]);
  });
});

describe("selectGroups: top_k, top_k_abs, min_p", () => {
  it("top_k: k = int(value * num_groups), clamped to [1, remaining]", () => {
    expect(selectGroups(F32([5, 1, 4, 2]), opts("top_k", 0.5))).toEqual([0, 2]);
    expect(selectGroups(F32([5, 1, 4, 2]), opts("top_k", 0.5, { type: "smallest" }))).toEqual([1, 3]);
    // num_groups counts zero groups too: int(0.25*4) = 1
    expect(selectGroups(F32([0, 3, 0, 1]), opts("top_k", 0.25, { include_zero: false }))).toEqual([1]);
    expect(selectGroups(F32([0, 3, 0, 1]), opts("top_k", 0.1, { include_zero: false }))).toEqual([1]);
    expect(selectGroups(F32([0, 3, 0, 1]), opts("top_k", 1, { include_zero: false }))).toEqual([1, 3]);
    // 0.7*10 = 7.000000000000001 in doubles -> 7
    expect(selectGroups(F32([9, 8, 7, 6, 5, 4, 3, 2, 1, 0]), opts("top_k", 0.7)).length).toBe(7);
    // the RAGEN unit test: 4 groups, value 0.5
    expect(selectGroups(F32([1, 0.5, 2, 0]), opts("top_k", 0.5))).toEqual([0, 2]);
  });
  it("top_k_abs: k = int(value)", () => {
    expect(selectGroups(F32([5, 1, 4, 2]), opts("top_k_abs", 3))).toEqual([0, 2, 3]);
    expect(selectGroups(F32([5, 1, 4, 2]), opts("top_k_abs", 2.9, { type: "smallest" }))).toEqual([1, 3]);
    expect(selectGroups(F32([5, 1, 4, 2]), opts("top_k_abs", 0))).toEqual([0]);
    expect(selectGroups(F32([5, 1, 4, 2]), opts("top_k_abs", 10))).toEqual([0, 1, 2, 3]);
  });
  it("top_k ties broken by group index", () => {
    expect(selectGroups(F32([1, 1, 1, 1]), opts("top_k", 0.5))).toEqual([0, 1]);
    expect(selectGroups(F32([1, 1, 1, 1]), opts("top_k", 0.5, { type: "smallest" }))).toEqual([0, 1]);
    expect(selectGroups(F32([0, 2, 1, 2]), opts("top_k_abs", 1))).toEqual([1]);
  });
  it("min_p", () => {
    // largest: keep s >= max*value
    expect(selectGroups(F32([4, 2, 1, 3]), opts("min_p", 0.5))).toEqual([0, 1, 3]);
    // smallest: keep s <= min/value
    expect(selectGroups(F32([4, 2, 1, 3]), opts("min_p", 0.5, { type: "smallest" }))).toEqual([1, 2]);
    expect(
      selectGroups(F32([4, 0, 1]), opts("min_p", 0.5, { type: "smallest", include_zero: false })),
    ).toEqual([2]);
    expect(selectGroups(F32([4, 0, 1]), opts("min_p", 0.5, { type: "smallest" }))).toEqual([1]);
    // float32: 7 * 0.1f rounds to 0.7f, so 0.7 is kept (doubles would drop it); checked with torch
    expect(selectGroups(F32([0.7, 7.0, 1.2]), opts("min_p", 0.1))).toEqual([0, 1, 2]);
  });
  it("ranked order is RAGEN's (by rank), selectGroups is ascending", () => {
    expect(selectGroupsRanked(F32([1, 5, 3]), opts("top_k_abs", 2))).toEqual([1, 2]);
    expect(selectGroupsRanked(F32([3, 1, 5]), opts("top_k_abs", 3))).toEqual([2, 0, 1]);
    expect(selectGroups(F32([3, 1, 5]), opts("top_k_abs", 3))).toEqual([0, 1, 2]);
    expect(selectGroupsRanked(F32([1, 5, 3]), opts("min_p", 0.1))).toEqual([0, 1, 2]);
  });
});

describe("groupScores and metrics", () => {
  const rows = [
    [1, 0],
    [1, 1],
    [3, 1],
  ];
  it("reward_variance is the unbiased std; reward the mean; reward_sum the sum", () => {
    expect(Array.from(groupScores(rows, "reward_variance"))).toEqual([f32(Math.SQRT1_2), 0, f32(Math.SQRT2)]);
    expect(Array.from(groupScores(rows, "reward"))).toEqual([0.5, 1, 2]);
    expect(Array.from(groupScores(rows, "reward_sum"))).toEqual([1, 2, 4]);
    // n-1: the std of [0, 10.9, 10.9, -0.3] is sqrt(122.1475/3) = 6.3809…, not sqrt(122.1475/4) = 5.526…
    expect(groupScores([[0, 10.9, 10.9, -0.3]], "reward_variance")[0]).toBeCloseTo(6.3809, 4);
  });
  it("works in float32 (torch)", () => {
    // -0.1 three times: float32 values, float32 cascade sum
    expect(groupScores([[-0.1, -0.1, -0.1]], "reward_sum")[0]).toBe(
      f32(f32(f32(-0.1) + f32(-0.1)) + f32(-0.1)),
    );
    expect(groupScores([[0.1, 0.2]], "reward")[0]).toBe(f32(f32(f32(0.1) + f32(0.2)) / 2));
  });
  it("validates inputs, naming the field", () => {
    const err = (fn: () => unknown): FilterInputError => {
      try {
        fn();
      } catch (e) {
        expect(e).toBeInstanceOf(FilterInputError);
        return e as FilterInputError;
      }
      throw new Error("expected a FilterInputError");
    };
    expect(err(() => groupScores([[1, 2], [3]], "reward")).field).toBe("episodeScores[1]");
    expect(err(() => groupScores([[1], [2]], "reward_variance")).message).toMatch(/group size >= 2/);
    expect(groupScores([[1], [2]], "reward_sum")).toEqual(F32([1, 2]));
    expect(err(() => groupScores([], "reward")).field).toBe("episodeScores");
    expect(err(() => groupScores([[1, Number.NaN]], "reward")).field).toBe("episodeScores[0][1]");
    expect(err(() => groupScores([[1, 1e39]], "reward")).field).toBe("episodeScores[0][1]");
    expect(err(() => groupScores(rows, "entropy" as FilterMetric)).message).toMatch(/reward_variance/);
    const s = F32([1, 2]);
    expect(err(() => selectGroups(s, opts("top_q" as "top_p", 1))).field).toBe("strategy");
    expect(err(() => selectGroups(s, linear(-0.1))).field).toBe("value");
    expect(err(() => selectGroups(s, linear(Number.NaN))).field).toBe("value");
    expect(err(() => selectGroups(s, linear(0.5, { top_p_mode: "cubic" as "linear" }))).field).toBe(
      "top_p_mode",
    );
    expect(err(() => selectGroups(s, linear(0.5, { type: "biggest" as "largest" }))).field).toBe("type");
    expect(err(() => selectGroups(s, linear(0.5, { include_zero: 1 as unknown as boolean }))).field).toBe(
      "include_zero",
    );
    expect(err(() => selectGroups(s, linear(0.5, { selection_eps: -1 }))).field).toBe("selection_eps");
    expect(err(() => selectGroups([1, 2] as unknown as Float32Array, linear(0.5))).field).toBe("scores");
    expect(err(() => selectGroups(F32([1, Number.NaN]), linear(0.5))).field).toBe("scores[1]");
    expect(err(() => filterMetrics(rows, "reward", [0, 0])).field).toBe("kept");
    expect(err(() => filterMetrics(rows, "reward", [3])).field).toBe("kept");
  });
  it("DEFAULT_FILTER is config/base.yaml: top_p 1.0, i.e. no filtering", () => {
    expect(DEFAULT_FILTER).toEqual({
      metric: "reward_variance",
      strategy: "top_p",
      value: 1.0,
      top_p_mode: "linear",
      type: "largest",
      include_zero: true,
      selection_eps: 0.01,
    });
    const r = runGroupFilter([
      [0, 0],
      [1, 0],
    ]);
    expect(r.kept).toEqual([0, 1]);
    expect(r.noFilter).toBe(true);
    expect(r.metrics["rollout/filter_zero_count"]).toBe(1);
  });
  it("metric names and values (hand-computed)", () => {
    const m = filterMetrics(rows, "reward_variance", [2, 0]);
    expect(Object.keys(m).sort()).toEqual(
      [
        "rollout/in_group_std",
        "rollout/in_group_max",
        "rollout/in_group_mean",
        "rollout/chosen_in_group_std",
        "rollout/chosen_in_group_max",
        "rollout/chosen_in_group_mean",
        "rollout/in_group_reward_std",
        "rollout/in_group_reward_max",
        "rollout/in_group_reward_mean",
        "rollout/in_group_reward_sum",
        "rollout/chosen_in_group_reward_std",
        "rollout/chosen_in_group_reward_max",
        "rollout/chosen_in_group_reward_mean",
        "rollout/chosen_in_group_reward_sum",
        "rollout/filter_kept_count",
        "rollout/filter_kept_ratio",
        "rollout/filter_zero_count",
      ].sort(),
    );
    expect(m["rollout/in_group_reward_std"]).toBeCloseTo((Math.SQRT1_2 + Math.SQRT2) / 3, 6);
    expect(m["rollout/in_group_reward_max"]).toBeCloseTo(5 / 3, 6);
    expect(m["rollout/in_group_reward_mean"]).toBeCloseTo(3.5 / 3, 6);
    expect(m["rollout/in_group_reward_sum"]).toBeCloseTo(7 / 3, 6);
    expect(m["rollout/chosen_in_group_reward_std"]).toBeCloseTo((Math.SQRT1_2 + Math.SQRT2) / 2, 6);
    expect(m["rollout/chosen_in_group_reward_max"]).toBe(2);
    expect(m["rollout/chosen_in_group_reward_mean"]).toBe(1.25);
    expect(m["rollout/chosen_in_group_reward_sum"]).toBe(2.5);
    expect(m["rollout/filter_kept_count"]).toBe(2);
    expect(m["rollout/filter_kept_ratio"]).toBe(f32(2 / 3));
    expect(m["rollout/filter_zero_count"]).toBe(1);
    expect(m["rollout/in_group_std"]).toBe(m["rollout/in_group_reward_std"]);
    const none = filterMetrics(rows, "reward", []);
    expect(none["rollout/chosen_in_group_reward_mean"]).toBe(0);
    expect(none["rollout/filter_kept_ratio"]).toBe(0);
    expect(none["rollout/filter_zero_count"]).toBe(0);
  });
  it("RAGEN's reward_sum unit test: top half by group sum", () => {
    // per-sample scores are the row sums of RAGEN's (8, 2) original_rm_scores
    const episodes = [
      [5, 5],
      [3, 3],
      [4, 3],
      [1, 0],
    ];
    const r = runGroupFilter(episodes, {
      ...DEFAULT_FILTER,
      metric: "reward_sum",
      strategy: "top_k",
      value: 0.5,
    });
    expect(r.kept).toEqual([0, 2]);
    expect(r.metrics["rollout/in_group_reward_sum"]).toBe(6);
    expect(r.metrics["rollout/chosen_in_group_reward_sum"]).toBe(8.5);
    expect(r.noFilter).toBe(false);
  });
  it("groupStats with group size 1 gives NaN std like torch", () => {
    expect(Number.isNaN(groupStats([[1], [2]]).std[0])).toBe(true);
  });
});

describe("properties", () => {
  const scoresArb = fc.array(
    fc.oneof(
      fc.constantFrom(0, 0, 0.5, 1, 2),
      fc.float({ min: Math.fround(-5), max: Math.fround(12), noNaN: true, noDefaultInfinity: true }),
    ),
    { minLength: 0, maxLength: 40 },
  );
  const optsArb: fc.Arbitrary<SelectOptions> = fc.record({
    strategy: fc.constantFrom("top_p", "top_k", "top_k_abs", "min_p"),
    value: fc.oneof(fc.double({ min: 0, max: 1.2, noNaN: true }), fc.constantFrom(0, 0.5, 0.9, 1, 3)),
    top_p_mode: fc.constantFrom("linear", "softmax"),
    type: fc.constantFrom("largest", "smallest"),
    include_zero: fc.boolean(),
    selection_eps: fc.constantFrom(0.01, 0, 0.1),
  });
  const candidates = (s: Float32Array, o: SelectOptions): number[] =>
    Array.from(s.keys()).filter((i) => o.include_zero || Math.abs(s[i]) > 1e-10);

  it("kept is a sorted, duplicate-free subset of the candidates; ranked is a permutation of it", () => {
    fc.assert(
      fc.property(scoresArb, optsArb, (xs, o) => {
        const s = F32(xs);
        const kept = selectGroups(s, o);
        const cand = new Set(candidates(s, o));
        for (let i = 1; i < kept.length; i++) expect(kept[i]).toBeGreaterThan(kept[i - 1]);
        for (const g of kept) expect(cand.has(g)).toBe(true);
        expect([...selectGroupsRanked(s, o)].sort((a, b) => a - b)).toEqual(kept);
        expect(selectGroups(s, o)).toEqual(kept);
      }),
      { numRuns: 500 },
    );
  });

  it("top_k / top_k_abs keep max(1, min(k, remaining)) groups, the best-ranked ones", () => {
    fc.assert(
      fc.property(scoresArb, optsArb, fc.constantFrom("top_k", "top_k_abs"), (xs, o0, strategy) => {
        const o = { ...o0, strategy } as SelectOptions;
        const s = F32(xs);
        const cand = candidates(s, o);
        const kept = selectGroups(s, o);
        if (cand.length === 0) {
          expect(kept).toEqual([]);
          return;
        }
        const k = strategy === "top_k" ? Math.trunc(o.value * s.length) : Math.trunc(o.value);
        expect(kept.length).toBe(Math.max(1, Math.min(k, cand.length)));
        const dropped = cand.filter((g) => !kept.includes(g));
        for (const g of kept) {
          for (const d of dropped) {
            if (o.type === "largest") expect(s[g]).toBeGreaterThanOrEqual(s[d]);
            else expect(s[g]).toBeLessThanOrEqual(s[d]);
            // equal scores: the lower index wins
            if (s[g] === s[d]) expect(g).toBeLessThan(d);
          }
        }
      }),
      { numRuns: 500 },
    );
  });

  it("top_p with value >= 1 keeps every candidate; softmax top_p keeps at least one", () => {
    fc.assert(
      fc.property(scoresArb, optsArb, fc.double({ min: 1, max: 5, noNaN: true }), (xs, o, v) => {
        const s = F32(xs);
        const cand = candidates(s, o);
        expect(selectGroups(s, { ...o, strategy: "top_p", value: v })).toEqual(cand);
        const soft = selectGroups(s, { ...o, strategy: "top_p", top_p_mode: "softmax", value: o.value % 1 });
        expect(soft.length >= 1).toBe(cand.length > 0);
      }),
      { numRuns: 300 },
    );
  });

  it("linear top_p keeps a positive best-ranked prefix reaching value*sum - eps, or nothing", () => {
    fc.assert(
      fc.property(scoresArb, optsArb, (xs, o0) => {
        const o = { ...o0, strategy: "top_p", top_p_mode: "linear", value: o0.value % 1 } as SelectOptions;
        const s = F32(xs);
        const cand = candidates(s, o);
        const kept = selectGroups(s, o);
        const total = cand.reduce((a, g) => a + s[g], 0);
        const mass = kept.reduce((a, g) => a + s[g], 0);
        for (const g of kept) expect(s[g]).toBeGreaterThan(0);
        if (kept.length > 0) {
          expect(mass).toBeGreaterThanOrEqual(
            o.value * total - (o.selection_eps ?? 0.01) - 1e-4 * (1 + Math.abs(total)),
          );
          const dropped = cand.filter((g) => !kept.includes(g));
          for (const g of kept)
            for (const d of dropped) {
              if (o.type === "largest") expect(s[g]).toBeGreaterThanOrEqual(s[d]);
              else expect(s[g]).toBeLessThanOrEqual(s[d]);
            }
        }
      }),
      { numRuns: 500 },
    );
  });

  it("min_p keeps exactly the scores past the cutoff (away from float32 edges)", () => {
    fc.assert(
      fc.property(scoresArb, optsArb, (xs, o0) => {
        const o = { ...o0, strategy: "min_p" } as SelectOptions;
        const s = F32(xs);
        const cand = candidates(s, o);
        if (cand.length === 0) return;
        const vals = cand.map((g) => s[g]);
        const cutoff =
          o.type === "largest" ? Math.max(...vals) * o.value : Math.min(...vals) / (o.value + 1e-10);
        const kept = new Set(selectGroups(s, o));
        for (const g of cand) {
          if (Math.abs(s[g] - cutoff) < 1e-5 * (1 + Math.abs(cutoff))) continue;
          expect(kept.has(g)).toBe(o.type === "largest" ? s[g] > cutoff : s[g] < cutoff);
        }
      }),
      { numRuns: 500 },
    );
  });

  it("with distinct scores, relabelling groups relabels the kept set", () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.integer({ min: -20, max: 100 }), { maxLength: 20 }),
        optsArb,
        fc.nat(),
        (xs, o, seed) => {
          const s = F32(xs.map((x) => x / 4));
          const perm = Array.from(s.keys()).sort(
            (a, b) => ((a * 7919 + seed) % 101) - ((b * 7919 + seed) % 101) || a - b,
          );
          const p = F32(perm.map((i) => s[i]));
          const kept = new Set(selectGroups(s, o));
          const keptP = selectGroups(p, o).map((j) => perm[j]);
          expect(new Set(keptP)).toEqual(kept);
        },
      ),
      { numRuns: 300 },
    );
  });

  it("groupScores agrees with double-precision formulas to float32 precision", () => {
    const rowsArb = fc.integer({ min: 1, max: 6 }).chain((n) =>
      fc.array(fc.array(fc.double({ min: -5, max: 12, noNaN: true }), { minLength: n, maxLength: n }), {
        minLength: 1,
        maxLength: 10,
      }),
    );
    fc.assert(
      fc.property(rowsArb, (rows) => {
        const sums = groupScores(rows, "reward_sum");
        const means = groupScores(rows, "reward");
        rows.forEach((r, g) => {
          const x = r.map(f32);
          const sum = x.reduce((a, b) => a + b, 0);
          const scale = 1e-6 * (1 + x.reduce((a, b) => a + Math.abs(b), 0));
          expect(Math.abs(sums[g] - sum)).toBeLessThanOrEqual(scale);
          expect(Math.abs(means[g] - sum / x.length)).toBeLessThanOrEqual(scale);
        });
        if (rows[0].length >= 2) {
          const stds = groupScores(rows, "reward_variance");
          rows.forEach((r, g) => {
            const x = r.map(f32);
            const m = x.reduce((a, b) => a + b, 0) / x.length;
            const sd = Math.sqrt(x.reduce((a, b) => a + (b - m) ** 2, 0) / (x.length - 1));
            expect(Math.abs(stds[g] - sd)).toBeLessThanOrEqual(1e-5 * (1 + sd + Math.abs(m)));
          });
        }
      }),
      { numRuns: 300 },
    );
  });
});

// ---------------------------------------------------------------- parity with RAGEN + torch
// test/fixtures/filter/gen_ragen_filter.py runs RAGEN's rollout_filter.py (20daedc) with
// torch 1.13.1 (Debian python3-torch, CPU, AVX2 kernels) on generated score matrices.
// torch's sort/topk are not stable: where tied groups straddle the cut ("tieAtCut") only the
// kept ranking keys are compared, and the ranked order only where no candidates tie.

interface FilterCase {
  kind: "filter";
  metric: FilterMetric;
  episodeScores: number[][];
  config: SelectOptions;
  scores: number[];
  kept: number[];
  tieAmbiguous: boolean;
  tieAtCut: boolean;
  metrics: Record<string, number | "NaN">;
  softmaxInput?: number[];
  softmaxNegate?: boolean;
  probs?: number[];
}
const fixture = readFileSync(new URL("../fixtures/filter/ragen-filter.jsonl", import.meta.url), "utf8")
  .split("\n")
  .filter((l) => l.length > 0)
  .map((l) => JSON.parse(l) as { kind: string })
  .filter((c): c is FilterCase => c.kind === "filter");

// The key RAGEN ranks candidates by: the score, or its softmax probability in softmax top_p.
function rankKeys(s: Float32Array, o: SelectOptions): Map<number, number> {
  const cand = Array.from(s.keys()).filter((i) => o.include_zero || Math.abs(s[i]) > Math.fround(1e-10));
  if (o.strategy !== "top_p" || o.top_p_mode !== "softmax") return new Map(cand.map((i) => [i, s[i]]));
  const probs = softmaxF32(cand.map((i) => (o.type === "largest" ? s[i] : -s[i])));
  return new Map(cand.map((i, j) => [i, probs[j]]));
}
const sortedKeys = (keys: Map<number, number>, idx: readonly number[]): number[] =>
  idx.map((i) => keys.get(i)!).sort((a, b) => a - b);

describe("parity with RAGEN's rollout_filter.py under torch (CPU)", () => {
  it("covers every strategy, mode, type, include_zero and metric", () => {
    expect(fixture.length).toBeGreaterThanOrEqual(500);
    const seen = new Set(
      fixture.map((c) =>
        [
          c.config.strategy,
          c.config.strategy === "top_p" ? c.config.top_p_mode : "",
          c.config.type,
          c.config.include_zero,
        ].join("/"),
      ),
    );
    expect(seen.size).toBe(4 * 4 + 4);
    for (const m of ["reward_variance", "reward", "reward_sum"])
      expect(fixture.some((c) => c.metric === m)).toBe(true);
    expect(fixture.filter((c) => c.kept.length === 0).length).toBeGreaterThan(10);
    expect(fixture.filter((c) => !c.tieAtCut).length).toBeGreaterThan(400);
  });

  it("group scores are bit-identical", () => {
    const bad = fixture.filter(
      (c) => JSON.stringify(Array.from(groupScores(c.episodeScores, c.metric))) !== JSON.stringify(c.scores),
    );
    expect(bad.map((c) => c.scores)).toEqual([]);
  });

  it("kept groups are identical (same score values where torch picked among ties)", () => {
    for (const [i, c] of fixture.entries()) {
      const s = F32(c.scores);
      const kept = selectGroups(s, c.config);
      const theirs = [...c.kept].sort((a, b) => a - b);
      if (c.tieAtCut) {
        const keys = rankKeys(s, c.config);
        expect(sortedKeys(keys, kept), `case ${i}`).toEqual(sortedKeys(keys, theirs));
      } else {
        expect(kept, `case ${i}`).toEqual(theirs);
      }
      if (!c.tieAmbiguous) expect(selectGroupsRanked(s, c.config), `case ${i}`).toEqual(c.kept);
    }
  });

  it("softmax probabilities are bit-identical", () => {
    const cases = fixture.filter((c) => c.probs !== undefined);
    expect(cases.length).toBeGreaterThan(50);
    for (const c of cases) {
      const x = c.softmaxNegate ? c.softmaxInput!.map((v) => -v) : c.softmaxInput!;
      expect(Array.from(softmaxF32(x))).toEqual(c.probs);
    }
  });

  it("metrics are bit-identical given torch's kept order", () => {
    for (const [i, c] of fixture.entries()) {
      const m = filterMetrics(c.episodeScores, c.metric, c.kept) as Record<string, number>;
      const want = Object.fromEntries(
        Object.entries(c.metrics).map(([k, v]) => [k, v === "NaN" ? Number.NaN : v]),
      );
      expect(m, `case ${i}`).toEqual(want);
    }
  });
});
