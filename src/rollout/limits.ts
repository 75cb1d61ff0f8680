// How big a rollout may be and which seeds it may play, checked the same way by the CLI and the
// server before any episode starts: a batch that cannot be played is refused up front, never
// crashed into (array lengths, 30 MB/s of memory) or wrapped past the seed range.

import { LIMITS, MAX_SEED as SEED_MAX } from "../../protocol/settings.ts";
import { codeOf } from "../errors/boundary.ts";
import { type Code, RollgymError } from "../errors/catalogue.ts";

/** Seeds are unsigned 32-bit: NumPy's legacy seeding (Sokoban) takes [0, 2^32). */

export interface RolloutLimits {
  /** Groups one rollout may ask for. */
  maxGroupsPerRollout: number;
  /** Episodes running at once (the CLI runs one rollout, the server sums its rollouts). */
  maxEpisodesInFlight: number;
}

export const DEFAULT_ROLLOUT_LIMITS: Readonly<RolloutLimits> = {
  maxGroupsPerRollout: LIMITS.max_groups_per_rollout.default,
  maxEpisodesInFlight: LIMITS.max_episodes_in_flight.default,
};

/** The codes checkRolloutShape refuses with; each names its request field (`tags`, `group_size`, `seed`). */
const SHAPE_CODES: ReadonlySet<Code> = new Set([
  "max_groups_per_rollout",
  "max_episodes_per_rollout",
  "seed_range",
]);

/** Whether `error` is checkRolloutShape's refusal. */
export function isShapeRefusal(error: unknown): error is RollgymError {
  const code = codeOf(error);
  return code !== null && SHAPE_CODES.has(code);
}

export interface RolloutShape {
  tags: readonly { tag: string; groups: number }[];
  groupSize: number;
  /** The seed of group 0; group g plays seed + g. */
  seed: number;
}

/**
 * Refuses a rollout over the limits (`running` episodes already in flight) or one whose seeds
 * would pass 2^32 − 1. Messages name the limit or the range and the value asked for.
 */
export function checkRolloutShape(shape: RolloutShape, limits: RolloutLimits, running = 0): void {
  const groups = shape.tags.reduce((n, t) => n + t.groups, 0);
  if (groups > limits.maxGroupsPerRollout)
    throw new RollgymError("max_groups_per_rollout", { max: limits.maxGroupsPerRollout, groups });
  if (running + groups * shape.groupSize > limits.maxEpisodesInFlight) {
    throw new RollgymError("max_episodes_per_rollout", {
      max: limits.maxEpisodesInFlight,
      running,
      groups,
      groupSize: shape.groupSize,
    });
  }
  // Group g plays seed + g; every one of them must be a seed in [0, 2^32).
  const { seed } = shape;
  if (!Number.isSafeInteger(seed) || seed < 0 || seed + Math.max(groups, 1) - 1 > SEED_MAX)
    throw new RollgymError("seed_range", { seed, groups, max: SEED_MAX });
}
