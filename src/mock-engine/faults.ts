// Seeded fault injection: for the k-th valid generation request, one draw seeded by (seed, k)
// picks drop / error / rate limit / abort (exclusive) and another the slow tail, so counts over
// the first N requests are exact for a seed however requests interleave.
import type { EngineConfig } from "./options.ts";
import { mixSeed, Rng } from "./rng.ts";

export type Fault = "none" | "internal-error" | "unavailable" | "rate-limit" | "drop" | "abort";

export interface Plan {
  fault: Fault;
  slow: boolean;
  /** Jitter draws for this request. */
  rng: Rng;
  /** For "abort": where in the generation it stops, as a share of its length, in [0, 1). */
  abortAt: number;
}

export function planFor(config: EngineConfig, index: number): Plan {
  const rng = new Rng(mixSeed(config.seed, "faults", index));
  const u = rng.next();
  const slow = rng.next() < config.slowRate;
  const split = rng.next();
  let fault: Fault = "none";
  if (u < config.dropRate) fault = "drop";
  else if (u < config.dropRate + config.errorRate)
    fault = split < config.unavailableShare ? "unavailable" : "internal-error";
  else if (u < config.dropRate + config.errorRate + config.rateLimitRate) fault = "rate-limit";
  else if (u < config.dropRate + config.errorRate + config.rateLimitRate + config.abortRate) fault = "abort";
  // Its own stream, so adding abortRate leaves every other draw (and jitter) as it was.
  const abortAt = new Rng(mixSeed(config.seed, "abort-at", index)).next();
  return { fault, slow, rng, abortAt };
}

/** `ms` scaled by a uniform factor in [1 - jitter, 1 + jitter]. */
export function jittered(ms: number, jitter: number, rng: Rng): number {
  if (ms <= 0 || jitter === 0) return ms;
  return ms * (1 + jitter * (2 * rng.next() - 1));
}
