// How big a rollout may be and which seeds it may play, checked the same way by the CLI and the
// server before any episode starts: a batch that cannot be played is refused up front, never
// crashed into (array lengths, 30 MB/s of memory) or wrapped past the seed range.

/** Seeds are unsigned 32-bit: NumPy's legacy seeding (Sokoban) takes [0, 2^32). */
export const SEED_MAX = 2 ** 32 - 1;

export interface RolloutLimits {
  /** Groups one rollout may ask for. */
  maxGroupsPerRollout: number;
  /** Episodes running at once (the CLI runs one rollout, the server sums its rollouts). */
  maxEpisodesInFlight: number;
}

export const DEFAULT_ROLLOUT_LIMITS: Readonly<RolloutLimits> = {
  maxGroupsPerRollout: 4096,
  maxEpisodesInFlight: 65_536,
};

/** A rollout refused before it starts; `field` is the request field at fault. */
export class RolloutLimitError extends RangeError {
  readonly field: "tags" | "group_size" | "seed";
  /** The protocol's error code: "limit" for a configured limit, "bad_frame" for an impossible request. */
  readonly code: "limit" | "bad_frame";
  constructor(field: RolloutLimitError["field"], code: RolloutLimitError["code"], message: string) {
    super(message);
    this.name = "RolloutLimitError";
    this.field = field;
    this.code = code;
  }
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
  if (groups > limits.maxGroupsPerRollout) {
    throw new RolloutLimitError(
      "tags",
      "limit",
      `max_groups_per_rollout is ${limits.maxGroupsPerRollout}; this rollout asks for ${groups} groups`,
    );
  }
  const episodes = groups * shape.groupSize;
  if (running + episodes > limits.maxEpisodesInFlight) {
    throw new RolloutLimitError(
      "group_size",
      "limit",
      `max_episodes_in_flight is ${limits.maxEpisodesInFlight}; ` +
        `${running > 0 ? `${running} are running and ` : ""}this rollout adds ${groups} groups × ${shape.groupSize} = ${episodes} episodes`,
    );
  }
  checkSeedRange(shape.seed, groups);
}

/** Group g plays seed + g; every one of them must be a seed in [0, 2^32). */
function checkSeedRange(seed: number, groups: number): void {
  if (!Number.isSafeInteger(seed) || seed < 0 || seed + Math.max(groups, 1) - 1 > SEED_MAX) {
    const last = seed + Math.max(groups, 1) - 1;
    throw new RolloutLimitError(
      "seed",
      "bad_frame",
      `seeds ${seed}..${last} (${groups} groups from seed ${seed}) pass ${SEED_MAX}; allowed: a batch seed from 0 to ${SEED_MAX - Math.max(groups, 1) + 1} for ${groups} groups (seeds are never wrapped)`,
    );
  }
}
