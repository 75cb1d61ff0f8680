// RAGEN's rollout group filter (ragen/trainer/rollout_filter.py, RewardRolloutFilter):
// per-group scores, group selection and the filter metrics.
//
// Numerics follow PyTorch on CPU bit for bit (float32 tensors, AVX2 kernels): group
// std is a double-precision Welford pass (two-pass around a float32 mean when there is
// a single group), sums use torch's cascade summation, Python scalars are rounded to
// float32 before tensor arithmetic and comparisons, and softmax uses SLEEF's expf.
// AVX-512 builds of torch reduce in 16 lanes and may differ in the last bit of a sum.
// Ties are broken by group index (torch's sort/topk are not stable, so RAGEN's choice
// among tied groups is arbitrary).

import {
  defaultsOf,
  FILTER,
  FILTER_METRICS,
  FILTER_STRATEGIES,
  FILTER_TYPES,
  type FilterMetric,
  type FilterValues,
  TOP_P_MODES,
} from "../../protocol/settings.ts";
import { RollgymError } from "../errors/catalogue.ts";

/** The filter's settings by wire name (protocol/settings.ts FILTER, whose descriptions say what each does). */
export type FilterConfig = FilterValues;

/** What selection reads: the settings but the metric, selection_eps defaulting to 0.01. */
export type SelectOptions = Pick<
  FilterConfig,
  "strategy" | "value" | "top_p_mode" | "type" | "include_zero"
> &
  Partial<Pick<FilterConfig, "selection_eps">>;

/** `actor_rollout_ref.rollout.rollout_filter_*` defaults of RAGEN's config/base.yaml (no filtering). */
export const DEFAULT_FILTER: Readonly<FilterConfig> = Object.freeze(defaultsOf(FILTER));

/**
 * A setting RAGEN accepts but that keeps every group, likely not what was meant: top_k takes
 * the fraction of groups to keep (k = int(value × groups)), so a value of 1 or more (a count,
 * as top_k_abs takes) keeps them all. Null when the setting is fine.
 */
export function filterNote(
  options: Pick<SelectOptions, "strategy" | "value">,
  valueName: string,
): string | null {
  if (options.strategy !== "top_k" || options.value < 1) return null;
  return (
    `${valueName} ${options.value} with top_k keeps every group: RAGEN's top_k keeps a fraction of the ` +
    `groups (k = int(value × groups), e.g. 0.25); for a number of groups use the strategy top_k_abs`
  );
}

/** Invalid filter input; `field` names the offending argument or option. */
export class FilterInputError extends RollgymError<"filter_input"> {
  declare readonly field: string;
  constructor(field: string, message: string) {
    super("filter_input", { field, message }, field);
    this.name = "FilterInputError";
  }
}

// ---------------------------------------------------------------- float32 helpers

const f32 = Math.fround;
/** Python's 1e-10 as a float32 tensor operand. */
const EPS_1E10 = f32(1e-10);

const f64Buf = new Float64Array(1);
const u64Buf = new BigUint64Array(f64Buf.buffer);

// One double ulp from x towards the sign of `dir` (x finite, non-zero).
function nudge(x: number, dir: number): number {
  f64Buf[0] = x;
  u64Buf[0] += x > 0 === dir > 0 ? 1n : -1n;
  return f64Buf[0];
}

// float32 fused multiply-add, correctly rounded: a*b is exact in double; the sum is
// rounded to odd in double (53 >= 24 + 2 bits) so the final rounding to float32 is exact.
function fma32(a: number, b: number, c: number): number {
  const p = a * b;
  const s = p + c;
  const bb = s - p;
  const err = p - (s - bb) + (c - bb);
  if (err === 0 || !Number.isFinite(s)) return f32(s);
  f64Buf[0] = s;
  const odd = (u64Buf[0] & 1n) === 1n;
  return f32(odd ? s : nudge(s, err));
}

function rintEven(x: number): number {
  const r = Math.round(x);
  // Math.round rounds halves up; the CPU rounds them to even.
  return r - x === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

// SLEEF's float constants (R_LN2f = log2(e), L2Uf + L2Lf = ln 2, the expf polynomial), as
// the float32 values the compiled code holds.
const R_LN2F = f32(Math.LOG2E);
const L2UF = f32(0.693145751953125);
const L2LF = f32(0.000001428606765330187);
const EXP_POLY = [
  0.00019852761761285365, 0.0013930435525253415, 0.008333360776305199, 0.041666485369205475,
  0.1666666716337204, 0.5,
].map(f32);

// SLEEF xexpf (1.0-ulp, FMA build), which torch's vectorised exp/softmax use on CPU.
function sleefExpf(d: number): number {
  if (d < -104) return 0;
  if (d > 100) return Number.POSITIVE_INFINITY;
  const q = rintEven(f32(d * R_LN2F));
  let s = fma32(q, -L2UF, d);
  s = fma32(q, -L2LF, s);
  let u = EXP_POLY[0];
  for (let i = 1; i < EXP_POLY.length; i++) u = fma32(u, s, EXP_POLY[i]);
  u = f32(1 + fma32(f32(s * s), u, s));
  const h = q >> 1;
  return f32(f32(u * 2 ** h) * 2 ** (q - h));
}

// torch SumKernel multi_row_sum for one lane: cascade of 4 accumulator levels.
function cascadeLane(seq: readonly number[]): number {
  const size = seq.length;
  const ceilLog2 = size <= 1 ? 0 : Math.ceil(Math.log2(size));
  const levelPower = Math.max(4, Math.floor(ceilLog2 / 4));
  const levelStep = 1 << levelPower;
  const levelMask = levelStep - 1;
  const acc = [0, 0, 0, 0];
  let i = 0;
  while (i + levelStep <= size) {
    for (let j = 0; j < levelStep; j++, i++) acc[0] = f32(acc[0] + seq[i]);
    for (let j = 1; j < 4; j++) {
      acc[j] = f32(acc[j] + acc[j - 1]);
      acc[j - 1] = 0;
      if ((i & (levelMask << (j * levelPower))) !== 0) break;
    }
  }
  for (; i < size; i++) acc[0] = f32(acc[0] + seq[i]);
  for (let j = 1; j < 4; j++) acc[0] = f32(acc[0] + acc[j]);
  return acc[0];
}

// torch SumKernel row_sum: 4 interleaved partial sums, tail into the first, then combined.
function rowSum(seq: readonly number[]): number {
  const sizeIlp = Math.floor(seq.length / 4);
  const partial = [0, 1, 2, 3].map((k) =>
    cascadeLane(Array.from({ length: sizeIlp }, (_, i) => seq[i * 4 + k])),
  );
  for (let i = sizeIlp * 4; i < seq.length; i++) partial[0] = f32(partial[0] + seq[i]);
  for (let k = 1; k < 4; k++) partial[0] = f32(partial[0] + partial[k]);
  return partial[0];
}

const VEC_LANES = 8; // Vectorized<float>::size() for torch's AVX2 (and default) CPU kernels

/** torch `x.sum()` of a contiguous float32 row on CPU (values must already be float32). */
function torchSum(x: readonly number[]): number {
  const n = x.length;
  if (n < VEC_LANES) return rowSum(x);
  const nv = Math.floor(n / VEC_LANES);
  const lanes: number[] = [];
  for (let l = 0; l < VEC_LANES; l++)
    lanes.push(rowSum(Array.from({ length: nv }, (_, i) => x[i * VEC_LANES + l])));
  let acc = 0;
  for (let k = nv * VEC_LANES; k < n; k++) acc = f32(acc + x[k]);
  for (const lane of lanes) acc = f32(acc + lane);
  return acc;
}

function torchMean(x: readonly number[]): number {
  return f32(torchSum(x) / x.length);
}

// vec::reduce_all with + (softmax's normaliser): 8 lanes, then the AVX2 shuffle tree.
function reduceAllSum(x: readonly number[]): number {
  if (x.length < VEC_LANES) {
    let acc = x[0];
    for (let i = 1; i < x.length; i++) acc = f32(acc + x[i]);
    return acc;
  }
  const v = x.slice(0, VEC_LANES);
  let d = VEC_LANES;
  for (; d < x.length - (x.length % VEC_LANES); d += VEC_LANES) {
    for (let l = 0; l < VEC_LANES; l++) v[l] = f32(v[l] + x[d + l]);
  }
  for (let l = 0; d + l < x.length; l++) v[l] = f32(v[l] + x[d + l]);
  for (const perm of [(i: number) => (i + 4) % 8, (i: number) => i ^ 2, (i: number) => i ^ 1]) {
    const w = v.map((_, i) => v[perm(i)]);
    for (let i = 0; i < VEC_LANES; i++) v[i] = f32(v[i] + w[i]);
  }
  return v[0];
}

/** torch.softmax(x, dim=0) for a float32 vector on CPU, bit for bit. */
export function softmaxF32(logits: ArrayLike<number>): Float32Array {
  const x = Array.from(logits, f32);
  const out = new Float32Array(x.length);
  if (x.length === 0) return out;
  const m = Math.max(...x);
  const e = x.map((v) => sleefExpf(f32(v - m)));
  const inv = f32(1 / reduceAllSum(e));
  for (let i = 0; i < e.length; i++) out[i] = f32(e[i] * inv);
  return out;
}

// ---------------------------------------------------------------- validation

function checkOneOf<T extends string>(field: string, v: unknown, allowed: readonly T[]): T {
  if (typeof v !== "string" || !(allowed as readonly string[]).includes(v)) {
    throw new FilterInputError(
      field,
      `must be one of ${allowed.map((a) => `"${a}"`).join(", ")}, got ${JSON.stringify(v)}`,
    );
  }
  return v as T;
}

function checkFiniteNumber(field: string, v: unknown, min?: number): number {
  if (typeof v !== "number" || !Number.isFinite(v)) {
    throw new FilterInputError(field, `must be a finite number, got ${String(v)}`);
  }
  if (min !== undefined && v < min) throw new FilterInputError(field, `must be >= ${min}, got ${v}`);
  return v;
}

/** Validates the score matrix and returns it as float32 values. */
function toMatrix(episodeScores: readonly (readonly number[])[], minGroupSize: number): number[][] {
  if (!Array.isArray(episodeScores) || episodeScores.length === 0) {
    throw new FilterInputError(
      "episodeScores",
      "must be a non-empty array of groups (arrays of episode scores)",
    );
  }
  const size = Array.isArray(episodeScores[0]) ? episodeScores[0].length : -1;
  return episodeScores.map((group, g) => {
    if (!Array.isArray(group))
      throw new FilterInputError(`episodeScores[${g}]`, "must be an array of numbers");
    if (group.length !== size) {
      throw new FilterInputError(
        `episodeScores[${g}]`,
        `all groups must have the same size (group 0 has ${size}, this one ${group.length})`,
      );
    }
    if (group.length < minGroupSize) {
      throw new FilterInputError(
        `episodeScores[${g}]`,
        minGroupSize === 2
          ? `reward_variance needs group size >= 2 (the unbiased std of one sample is NaN), got ${group.length}`
          : "groups must not be empty",
      );
    }
    return group.map((v, i) => {
      const x = typeof v === "number" ? f32(v) : Number.NaN;
      if (!Number.isFinite(x)) {
        throw new FilterInputError(
          `episodeScores[${g}][${i}]`,
          `must be a finite float32 number, got ${String(v)}`,
        );
      }
      return x;
    });
  });
}

// ---------------------------------------------------------------- group statistics

export interface GroupStats {
  std: Float32Array;
  max: Float32Array;
  mean: Float32Array;
  sum: Float32Array;
}

function stdOfRows(rows: readonly number[][]): Float32Array {
  const out = new Float32Array(rows.length);
  if (rows.length === 1) {
    // torch's all-reduce path (result has one element): float32 mean, double deviations.
    const x = rows[0];
    const mean = torchMean(x);
    let ss = 0;
    for (const v of x) ss += (v - mean) * (v - mean);
    out[0] = Math.sqrt(ss / (x.length - 1));
    return out;
  }
  rows.forEach((x, g) => {
    // WelfordOps<float, double>: sequential, accumulated in double.
    let mean = 0;
    let m2 = 0;
    x.forEach((v, i) => {
      const delta = v - mean;
      mean += delta / (i + 1);
      m2 += delta * (v - mean);
    });
    out[g] = Math.sqrt(m2 / (x.length - 1));
  });
  return out;
}

/**
 * Per-group std (unbiased), max, mean and sum of the episode scores, as RAGEN computes them
 * from the (num_groups, group_size) score matrix.
 */
export function groupStats(episodeScores: readonly (readonly number[])[]): GroupStats {
  const rows = toMatrix(episodeScores, 1);
  const std = rows[0].length >= 2 ? stdOfRows(rows) : new Float32Array(rows.length).fill(Number.NaN);
  return {
    std,
    max: Float32Array.from(rows, (r) => Math.max(...r)),
    mean: Float32Array.from(rows, torchMean),
    sum: Float32Array.from(rows, torchSum),
  };
}

/**
 * RAGEN's per-group selection score: unbiased std for "reward_variance" (despite the name),
 * mean for "reward", sum for "reward_sum". `episodeScores[g]` holds group g's episode scores
 * (after penalty and normalisation); all groups must have the same size.
 */
export function groupScores(
  episodeScores: readonly (readonly number[])[],
  metric: FilterMetric,
): Float32Array {
  checkOneOf("metric", metric, FILTER_METRICS);
  const rows = toMatrix(episodeScores, metric === "reward_variance" ? 2 : 1);
  if (metric === "reward_variance") return stdOfRows(rows);
  return Float32Array.from(rows, metric === "reward" ? torchMean : torchSum);
}

// ---------------------------------------------------------------- selection

function checkSelectOptions(opts: SelectOptions): Required<SelectOptions> {
  if (opts === null || typeof opts !== "object")
    throw new FilterInputError("opts", "must be an options object");
  const strategy = checkOneOf("strategy", opts.strategy, FILTER_STRATEGIES);
  const value = checkFiniteNumber("value", opts.value, 0);
  const top_p_mode = checkOneOf("top_p_mode", opts.top_p_mode, TOP_P_MODES);
  const type = checkOneOf("type", opts.type, FILTER_TYPES);
  if (typeof opts.include_zero !== "boolean") {
    throw new FilterInputError("include_zero", `must be a boolean, got ${String(opts.include_zero)}`);
  }
  const selection_eps = checkFiniteNumber(
    "selection_eps",
    opts.selection_eps ?? DEFAULT_FILTER.selection_eps,
    0,
  );
  return { strategy, value, top_p_mode, type, include_zero: opts.include_zero, selection_eps };
}

// Positions 0..n-1 ordered by key (descending or ascending), ties by position.
function rank(keys: readonly number[], descending: boolean): number[] {
  const order = keys.map((_, i) => i);
  order.sort((a, b) => (keys[a] === keys[b] ? a - b : keys[a] > keys[b] === descending ? -1 : 1));
  return order;
}

/**
 * RAGEN's `_select_top_groups`, returning kept group indices in the order RAGEN yields them
 * (by rank for top_p/top_k/top_k_abs, ascending for min_p and no-op top_p). That order only
 * matters for reproducing the float32 sums of the chosen_* metrics; see selectGroups.
 */
export function selectGroupsRanked(scores: Float32Array, opts: SelectOptions): number[] {
  if (!(scores instanceof Float32Array)) throw new FilterInputError("scores", "must be a Float32Array");
  scores.forEach((s, i) => {
    if (!Number.isFinite(s)) throw new FilterInputError(`scores[${i}]`, `must be finite, got ${s}`);
  });
  const o = checkSelectOptions(opts);
  const numGroups = scores.length;

  let idx = Array.from(scores, (_, i) => i);
  if (!o.include_zero) idx = idx.filter((i) => Math.abs(scores[i]) > EPS_1E10);
  if (idx.length === 0) return [];
  const s = idx.map((i) => scores[i]);
  const largest = o.type === "largest";

  switch (o.strategy) {
    case "top_p": {
      if (o.value >= 1) return idx;
      if (o.top_p_mode === "softmax") {
        const probs = Array.from(softmaxF32(largest ? s : s.map((v) => -v)));
        const order = rank(probs, true);
        // cumsum accumulates in double and stores float32; searchsorted compares in float32.
        const target = f32(o.value);
        let cum = 0;
        let cut = order.length;
        for (let j = 0; j < order.length; j++) {
          cum += probs[order[j]];
          if (f32(cum) >= target) {
            cut = j;
            break;
          }
        }
        return order.slice(0, Math.min(cut + 1, order.length)).map((j) => idx[j]);
      }
      const order = rank(s, largest);
      const threshold = f32(f32(f32(o.value) * torchSum(s)) - f32(o.selection_eps));
      // The running sum is a Python float; each comparison rounds it to float32.
      let cum = 0;
      let count = 0;
      for (const j of order) {
        if (f32(cum) >= threshold || s[j] <= 0) break;
        cum += s[j];
        count++;
      }
      // Not reaching the mass (e.g. every score 0) keeps nothing.
      return f32(cum) >= threshold ? order.slice(0, count).map((j) => idx[j]) : [];
    }
    case "top_k":
    case "top_k_abs": {
      const raw = o.strategy === "top_k" ? Math.trunc(o.value * numGroups) : Math.trunc(o.value);
      const k = Math.max(Math.min(raw, idx.length), 1);
      return rank(s, largest)
        .slice(0, k)
        .map((j) => idx[j]);
    }
    case "min_p": {
      if (largest) {
        const cutoff = f32(f32(Math.max(...s) * f32(o.value)) - EPS_1E10);
        return idx.filter((_, j) => s[j] >= cutoff);
      }
      const cutoff = f32(f32(Math.min(...s) / f32(o.value + 1e-10)) + EPS_1E10);
      return idx.filter((_, j) => s[j] <= cutoff);
    }
  }
}

/**
 * Groups RAGEN's filter keeps for these per-group scores, as ascending group indices.
 * Among tied groups the lower index wins.
 */
export function selectGroups(scores: Float32Array, opts: SelectOptions): number[] {
  return selectGroupsRanked(scores, opts).sort((a, b) => a - b);
}

// ---------------------------------------------------------------- metrics

export type FilterMetricName =
  | "rollout/in_group_std"
  | "rollout/in_group_max"
  | "rollout/in_group_mean"
  | "rollout/chosen_in_group_std"
  | "rollout/chosen_in_group_max"
  | "rollout/chosen_in_group_mean"
  | "rollout/in_group_reward_std"
  | "rollout/in_group_reward_max"
  | "rollout/in_group_reward_mean"
  | "rollout/in_group_reward_sum"
  | "rollout/chosen_in_group_reward_std"
  | "rollout/chosen_in_group_reward_max"
  | "rollout/chosen_in_group_reward_mean"
  | "rollout/chosen_in_group_reward_sum"
  | "rollout/filter_kept_count"
  | "rollout/filter_kept_ratio"
  | "rollout/filter_zero_count";

export type FilterMetrics = Record<FilterMetricName, number>;

/**
 * The metrics RewardRolloutFilter logs each step. `kept` are the kept group indices; pass
 * selectGroupsRanked's order to reproduce torch's float32 chosen_* means bit for bit (any
 * order gives the same values up to float32 rounding). Means over no groups are 0.
 */
export function filterMetrics(
  episodeScores: readonly (readonly number[])[],
  metric: FilterMetric,
  kept: readonly number[],
): FilterMetrics {
  const scores = groupScores(episodeScores, metric);
  const stats = groupStats(episodeScores);
  const numGroups = scores.length;
  if (!Array.isArray(kept)) throw new FilterInputError("kept", "must be an array of group indices");
  const seen = new Set<number>();
  for (const g of kept) {
    if (!Number.isInteger(g) || g < 0 || g >= numGroups || seen.has(g)) {
      throw new FilterInputError(
        "kept",
        `must hold distinct group indices in [0, ${numGroups}), got ${String(g)}`,
      );
    }
    seen.add(g);
  }
  const mean = (v: Float32Array): number => torchMean(Array.from(v));
  const chosen = (v: Float32Array): number => (kept.length === 0 ? 0 : torchMean(kept.map((g) => v[g])));
  const inStd = mean(stats.std);
  const inMax = mean(stats.max);
  const inMean = mean(stats.mean);
  const chStd = chosen(stats.std);
  const chMax = chosen(stats.max);
  const chMean = chosen(stats.mean);
  return {
    "rollout/in_group_std": inStd,
    "rollout/in_group_max": inMax,
    "rollout/in_group_mean": inMean,
    "rollout/chosen_in_group_std": chStd,
    "rollout/chosen_in_group_max": chMax,
    "rollout/chosen_in_group_mean": chMean,
    "rollout/in_group_reward_std": inStd,
    "rollout/in_group_reward_max": inMax,
    "rollout/in_group_reward_mean": inMean,
    "rollout/in_group_reward_sum": mean(stats.sum),
    "rollout/chosen_in_group_reward_std": chStd,
    "rollout/chosen_in_group_reward_max": chMax,
    "rollout/chosen_in_group_reward_mean": chMean,
    "rollout/chosen_in_group_reward_sum": chosen(stats.sum),
    "rollout/filter_kept_count": kept.length,
    "rollout/filter_kept_ratio": f32(kept.length / numGroups),
    "rollout/filter_zero_count": scores.filter((v) => Math.abs(v) <= EPS_1E10).length,
  };
}

export interface GroupFilterResult {
  /** Per-group selection scores. */
  scores: Float32Array;
  /** Kept group indices, ascending. */
  kept: number[];
  /** RAGEN's shortcut: top_p with value >= 1 and include_zero returns the batch untouched. */
  noFilter: boolean;
  metrics: FilterMetrics;
}

/** Scores, selection and metrics in one call, as RewardRolloutFilter.filter does them. */
export function runGroupFilter(
  episodeScores: readonly (readonly number[])[],
  config: FilterConfig = DEFAULT_FILTER,
): GroupFilterResult {
  const scores = groupScores(episodeScores, config.metric);
  const ranked = selectGroupsRanked(scores, config);
  return {
    scores,
    kept: [...ranked].sort((a, b) => a - b),
    noFilter: config.strategy === "top_p" && config.value >= 1 && config.include_zero,
    metrics: filterMetrics(episodeScores, config.metric, ranked),
  };
}
