import { readFileSync } from "node:fs";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { type BucketMode, bucketGroups, DEFAULT_BUCKETS, FIXED_RV_EDGES } from "../../src/rollout/buckets.ts";
import { FilterInputError } from "../../src/rollout/filter.ts";

describe("bucketGroups: quantile", () => {
  it("sorts by RV and cuts equal counts, remainder to the last bucket", () => {
    // ascending: g1 .1, g3 .2 | g2 .3, g4 .4, g0 .5
    expect(bucketGroups([0.5, 0.1, 0.3, 0.2, 0.4], 2, "quantile")).toEqual([2, 1, 2, 1, 2]);
    // 7 groups, 3 buckets: 2, 2, 3
    expect(bucketGroups([7, 6, 5, 4, 3, 2, 1], 3, "quantile")).toEqual([3, 3, 3, 2, 2, 1, 1]);
  });
  it("reduces the bucket count to the number of groups", () => {
    expect(bucketGroups([3, 1, 2], 6, "quantile")).toEqual([3, 1, 2]);
    expect(bucketGroups([0.2], 6, "quantile")).toEqual([1]);
    expect(bucketGroups([], 6, "quantile")).toEqual([]);
  });
  it("breaks ties by group index", () => {
    expect(bucketGroups([1, 1, 1, 1], 2, "quantile")).toEqual([1, 1, 2, 2]);
    expect(bucketGroups([0, 2, 0, 2, 0, 2], 3, "quantile")).toEqual([1, 2, 1, 3, 2, 3]);
  });
  it("one bucket holds everything", () => {
    expect(bucketGroups([5, 0, 3], 1, "quantile")).toEqual([1, 1, 1]);
  });
});

describe("bucketGroups: fixed_rv", () => {
  it("uses [0,1) [1,2) [2,3) [3,4) [4,5) [5,inf) whatever numBuckets says", () => {
    expect(FIXED_RV_EDGES).toEqual([0, 1, 2, 3, 4, 5]);
    expect(bucketGroups([0, 0.99, 1, 2.5, 3, 4.5, 5, 12], 6, "fixed_rv")).toEqual([1, 1, 2, 3, 4, 5, 6, 6]);
    expect(bucketGroups([0, 0.99, 1, 2.5, 3, 4.5, 5, 12], 3, "fixed_rv")).toEqual([1, 1, 2, 3, 4, 5, 6, 6]);
  });
  it("compares as float32 (RAGEN's reward_std tensor)", () => {
    // 0.99999999 is 1.0 in float32
    expect(bucketGroups([0.99999999, 0.9999999], 6, "fixed_rv")).toEqual([2, 1]);
  });
});

describe("bucketGroups: validation and defaults", () => {
  it("defaults are config/base.yaml's", () => {
    expect(DEFAULT_BUCKETS).toEqual({ numBuckets: 6, mode: "quantile" });
  });
  it("rejects bad input, naming the field", () => {
    const field = (fn: () => unknown): string => {
      try {
        fn();
      } catch (e) {
        expect(e).toBeInstanceOf(FilterInputError);
        return (e as FilterInputError).field;
      }
      throw new Error("expected a FilterInputError");
    };
    expect(field(() => bucketGroups([1], 0, "quantile"))).toBe("numBuckets");
    expect(field(() => bucketGroups([1], 2.5, "quantile"))).toBe("numBuckets");
    expect(field(() => bucketGroups([1], 6, "median" as BucketMode))).toBe("mode");
    expect(field(() => bucketGroups([1, Number.NaN], 6, "quantile"))).toBe("groupRv[1]");
    expect(field(() => bucketGroups([-0.5], 6, "fixed_rv"))).toBe("groupRv[0]");
    expect(field(() => bucketGroups(null as unknown as number[], 6, "quantile"))).toBe("groupRv");
  });
});

describe("bucketGroups: properties", () => {
  const rvArb = fc.array(
    fc.oneof(fc.constantFrom(0, 0.5, 1, 2), fc.double({ min: 0, max: 8, noNaN: true })),
    {
      maxLength: 60,
    },
  );
  it("quantile: bucket sizes and monotone RV across buckets", () => {
    fc.assert(
      fc.property(rvArb, fc.integer({ min: 1, max: 12 }), (rv, nb) => {
        const b = bucketGroups(rv, nb, "quantile");
        const n = rv.length;
        if (n === 0) {
          expect(b).toEqual([]);
          return;
        }
        const k = Math.min(nb, n);
        const sizes = Array.from({ length: k }, (_, i) => b.filter((x) => x === i + 1).length);
        const base = Math.floor(n / k);
        expect(sizes).toEqual(Array.from({ length: k }, (_, i) => (i === k - 1 ? base + (n % k) : base)));
        for (let g = 0; g < n; g++) {
          for (let h = 0; h < n; h++) {
            const [x, y] = [Math.fround(rv[g]), Math.fround(rv[h])];
            if (b[g] < b[h]) expect(x).toBeLessThanOrEqual(y);
            // equal RVs in different buckets: the lower group index is in the lower bucket
            if (b[g] < b[h] && x === y) expect(g).toBeLessThan(h);
          }
        }
      }),
      { numRuns: 300 },
    );
  });
  it("fixed_rv: bucket = min(floor(rv), 5) + 1", () => {
    fc.assert(
      fc.property(rvArb, fc.integer({ min: 1, max: 12 }), (rv, nb) => {
        expect(bucketGroups(rv, nb, "fixed_rv")).toEqual(
          rv.map((x) => Math.min(Math.floor(Math.fround(x)), 5) + 1),
        );
      }),
    );
  });
});

interface BucketCase {
  kind: "buckets";
  groupRv: number[];
  numBuckets: number;
  mode: BucketMode;
  buckets: number[];
  tieAmbiguous: boolean;
}
const cases = readFileSync(new URL("../fixtures/filter/ragen-filter.jsonl", import.meta.url), "utf8")
  .split("\n")
  .filter((l) => l.length > 0)
  .map((l) => JSON.parse(l) as { kind: string })
  .filter((c): c is BucketCase => c.kind === "buckets");

describe("parity with RAGEN's split_into_buckets under torch", () => {
  it("has both modes", () => {
    expect(cases.length).toBeGreaterThan(100);
    expect(cases.some((c) => c.mode === "fixed_rv")).toBe(true);
    expect(cases.filter((c) => c.mode === "quantile" && !c.tieAmbiguous).length).toBeGreaterThan(20);
  });
  it("assigns the same buckets (same RV values per bucket where torch's argsort picked among ties)", () => {
    for (const [i, c] of cases.entries()) {
      const mine = bucketGroups(c.groupRv, c.numBuckets, c.mode);
      if (c.mode === "quantile" && c.tieAmbiguous) {
        const perBucket = (b: number[]): number[][] => {
          const out: number[][] = Array.from({ length: Math.max(0, ...b) + 1 }, () => []);
          b.forEach((x, g) => {
            out[x].push(c.groupRv[g]);
          });
          return out.map((v) => v.sort((p, q) => p - q));
        };
        expect(perBucket(mine), `case ${i}`).toEqual(perBucket(c.buckets));
      } else {
        expect(mine, `case ${i}`).toEqual(c.buckets);
      }
    }
  });
});
