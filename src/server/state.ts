// What the server's parts share: options, configuration, registry, policy, sessions, metrics.
import type { FastifyBaseLogger } from "fastify";
import type { EnvRegistry } from "../../envs/registry.ts";
import type { RollgymConfig } from "../config/index.ts";
import type { Policy } from "../llm/policy.ts";
import { DEFAULT_ROLLOUT_LIMITS } from "../rollout/limits.ts";
import type { ServerMetrics } from "./metrics.ts";
import type { RolloutContext } from "./rollouts.ts";
import type { Session } from "./session.ts";

export interface ServerLimits {
  maxFrameBytes: number;
  maxRolloutsPerConnection: number;
  maxGroupsPerRollout: number;
  maxEpisodesInFlight: number;
  /** Finished groups a stream rollout may hold for a slow client before it pauses. */
  maxBufferedGroups: number;
  resumeGraceMs: number;
}

export const DEFAULT_LIMITS: ServerLimits = {
  maxFrameBytes: 1 << 20,
  maxRolloutsPerConnection: 16,
  ...DEFAULT_ROLLOUT_LIMITS,
  maxBufferedGroups: 64,
  resumeGraceMs: 60_000,
};

export interface ServerState {
  options: ServerLimits & { token: string | null; groupConcurrency: number; shutdownDeadlineMs: number };
  config: RollgymConfig;
  registry: EnvRegistry;
  policy: Policy;
  metrics: ServerMetrics;
  sessions: Map<string, Session>;
  episodesInFlight: number;
  closing: boolean;
  version: string;
  log: FastifyBaseLogger;
  rolloutContext: RolloutContext;
  limits(): Record<string, number>;
}
