// Episode scores as RAGEN hands them to the filter and the trainer: reward plus format
// penalty, optionally normalised per group, tag or batch (float32, as RAGEN's torch code).

import type { NormalizationGrouping, NormalizationMethod } from "../../protocol/settings.ts";

export type { NormalizationGrouping, NormalizationMethod };

export interface ScoredEpisode {
  groupId: number;
  tag: string;
  reward: number;
  penalty: number;
}

const f32 = Math.fround;

function mean32(xs: readonly number[]): number {
  let sum = 0;
  for (const x of xs) sum = f32(sum + x);
  return f32(sum / xs.length);
}

function std32(xs: readonly number[], mean: number): number {
  if (xs.length < 2) return Number.NaN;
  let sq = 0;
  for (const x of xs) sq += (x - mean) * (x - mean);
  return f32(Math.sqrt(sq / (xs.length - 1)));
}

function normalize(xs: readonly number[], method: NormalizationMethod): number[] {
  if (method === "identity") return [...xs];
  const mean = mean32(xs);
  if (method === "mean") return xs.map((x) => f32(x - mean));
  const std = std32(xs, mean);
  // RAGEN: all zeros when the spread is negligible (|std| <= 1e-6), which also covers NaN.
  const flat = !(Math.abs(std) > 1e-6);
  const z = xs.map((x) => (flat ? 0 : f32(f32(x - mean) / f32(std + 1e-6))));
  return method === "asym_clip" ? z.map((v) => Math.min(Math.max(v, -1), 3)) : z;
}

/**
 * RAGEN's _normalize_episode_rewards: score = float32(reward) + float32(penalty), then the
 * method applied within each grouping bucket, only when buckets are fewer than episodes.
 */
export function episodeScores(
  episodes: readonly ScoredEpisode[],
  grouping: NormalizationGrouping,
  method: NormalizationMethod,
): number[] {
  const scores = episodes.map((e) => f32(f32(e.reward) + f32(e.penalty)));
  const buckets = new Map<string, number[]>();
  episodes.forEach((e, i) => {
    const key = grouping === "state" ? `g${e.groupId}` : grouping === "inductive" ? `t${e.tag}` : "batch";
    const list = buckets.get(key) ?? [];
    list.push(i);
    buckets.set(key, list);
  });
  if (buckets.size >= episodes.length) return scores;
  const out = [...scores];
  for (const indices of buckets.values()) {
    const normalized = normalize(
      indices.map((i) => scores[i]),
      method,
    );
    indices.forEach((i, k) => {
      out[i] = normalized[k];
    });
  }
  return out;
}
