// Gradient-analysis bucketing of groups by reward std ("RV"), as RAGEN's
// RolloutFilter.split_into_buckets assigns groups to bucket_1 … bucket_N (low to high RV).

import { BUCKET_MODES, type BucketMode } from "../../protocol/settings.ts";
import { CONFIG_KEYS } from "../config/keys.ts";
import { FilterInputError } from "./filter.ts";

export { BUCKET_MODES, type BucketMode };

/** `gradient_analysis_num_buckets` / `gradient_analysis_bucket_mode` defaults of config/base.yaml. */
export const DEFAULT_BUCKETS: Readonly<{ numBuckets: number; mode: BucketMode }> = Object.freeze({
  numBuckets: CONFIG_KEYS["actor_rollout_ref.rollout.gradient_analysis_num_buckets"].default,
  mode: CONFIG_KEYS["actor_rollout_ref.rollout.gradient_analysis_bucket_mode"].default,
});

/** fixed_rv lower edges: bucket i+1 is [edge_i, edge_{i+1}), the last one is [5, ∞). */
export const FIXED_RV_EDGES: readonly number[] = [0, 1, 2, 3, 4, 5];

/**
 * 1-based bucket number for each group.
 *
 * - quantile: groups sorted by RV ascending (ties by group index) are cut into
 *   min(numBuckets, groups) buckets of floor(groups / buckets) groups, the remainder going
 *   to the last bucket.
 * - fixed_rv: the fixed std intervals of FIXED_RV_EDGES; numBuckets is ignored, as in RAGEN.
 *
 * RVs are compared as float32, like RAGEN's reward_std tensor.
 */
export function bucketGroups(groupRv: ArrayLike<number>, numBuckets: number, mode: BucketMode): number[] {
  if (groupRv === null || typeof groupRv !== "object" || typeof groupRv.length !== "number") {
    throw new FilterInputError("groupRv", "must be an array of per-group reward std values");
  }
  if (!Number.isInteger(numBuckets) || numBuckets < 1) {
    throw new FilterInputError("numBuckets", `must be an integer >= 1, got ${String(numBuckets)}`);
  }
  if (!(BUCKET_MODES as readonly string[]).includes(mode)) {
    throw new FilterInputError("mode", `must be "quantile" or "fixed_rv", got ${JSON.stringify(mode)}`);
  }
  const rv = Array.from(groupRv, (v, i) => {
    const x = typeof v === "number" ? Math.fround(v) : Number.NaN;
    // A group std is never negative; NaN (group size 1) would land in no fixed_rv bucket.
    if (!Number.isFinite(x) || x < 0) {
      throw new FilterInputError(`groupRv[${i}]`, `must be a finite number >= 0 (a std), got ${String(v)}`);
    }
    return x;
  });

  if (mode === "fixed_rv") {
    return rv.map((x) => {
      let b = 1;
      for (let i = 1; i < FIXED_RV_EDGES.length; i++) if (x >= FIXED_RV_EDGES[i]) b = i + 1;
      return b;
    });
  }

  const n = rv.length;
  const out = new Array<number>(n).fill(0);
  if (n === 0) return out;
  const buckets = Math.min(numBuckets, n);
  const perBucket = Math.floor(n / buckets);
  const order = rv.map((_, i) => i).sort((a, b) => rv[a] - rv[b] || a - b);
  order.forEach((g, pos) => {
    // The remainder stays in the last bucket.
    out[g] = Math.min(Math.floor(pos / perBucket), buckets - 1) + 1;
  });
  return out;
}
