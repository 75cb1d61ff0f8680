// What the server's parts share: options, configuration, registry, policy, sessions, metrics.
import { getHeapStatistics } from "node:v8";
import type { FastifyBaseLogger } from "fastify";
import type { EnvRegistry } from "../../envs/registry.ts";
import type { RollgymConfig } from "../config/index.ts";
import type { Policy } from "../llm/policy.ts";
import { DEFAULT_ROLLOUT_LIMITS } from "../rollout/limits.ts";
import type { ServerMetrics } from "./metrics.ts";
import type { RolloutContext } from "./rollouts.ts";
import type { HeldKind, Session, SessionMemory } from "./session.ts";
import type { UpdateCoordinator } from "./updates.ts";

export interface ServerLimits {
  maxFrameBytes: number;
  maxRolloutsPerConnection: number;
  maxGroupsPerRollout: number;
  /**
   * Episodes held over the whole server: running rollouts, finished groups awaiting
   * acknowledgement, and episodes of open env sessions.
   */
  maxEpisodesInFlight: number;
  /** The same, for one session (its share of the global budget: one client cannot take it all). */
  maxEpisodesPerConnection: number;
  /** Finished groups a stream rollout may hold for a slow client before it pauses. */
  maxBufferedGroups: number;
  /** Unacknowledged groups a session may hold; past it, new rollouts get `limit`. */
  maxUnackedGroups: number;
  /** Env sessions open at once on one connection. */
  maxEnvSessionsPerConnection: number;
  /**
   * The memory budget (budget.ts): bytes held over the whole server by rollouts in flight,
   * groups held for acknowledgement and env sessions, charged as measured.
   */
  maxHeldBytes: number;
  /** The same, for one session (its share). */
  maxHeldBytesPerConnection: number;
  /** An env session that takes no step for this long is closed and its episodes released. */
  envIdleMs: number;
  /** Bytes buffered for a client above which the server stops reading from it. */
  sendPauseBytes: number;
  /** Bytes buffered for a client above which it is closed (4008). */
  maxSendBufferBytes: number;
  /** How long a client may leave the server's replies unread (paused) before it is closed (4008). */
  sendStallMs: number;
  resumeGraceMs: number;
  /** How long a weight update may stay open before the server ends it at the old version (trainers' welcome.limits only). */
  maxUpdateMs: number;
}

export const DEFAULT_LIMITS: ServerLimits = {
  maxFrameBytes: 1 << 20,
  maxRolloutsPerConnection: 16,
  ...DEFAULT_ROLLOUT_LIMITS,
  maxEpisodesPerConnection: 16_384,
  maxBufferedGroups: 64,
  maxUnackedGroups: 4096,
  maxEnvSessionsPerConnection: 16,
  maxHeldBytes: defaultMaxHeldBytes(),
  maxHeldBytesPerConnection: 128 << 20,
  envIdleMs: 600_000,
  sendPauseBytes: 8 << 20,
  maxSendBufferBytes: 64 << 20,
  sendStallMs: 60_000,
  resumeGraceMs: 60_000,
  maxUpdateMs: 600_000,
};

/**
 * The default memory budget: 512 MiB, or an eighth of V8's heap limit when that is smaller.
 * What is charged is what stays reachable; the heap also holds garbage between full GCs (up to
 * 3× what survived the last one with serve's settings) and the server's own data, so the budget
 * stays well below the limit.
 */
function defaultMaxHeldBytes(): number {
  return Math.min(512 << 20, Math.floor(getHeapStatistics().heap_size_limit / 8));
}

/** The server's memory budget (budget.ts's MemoryBudget): bytes held over all sessions. */
export interface ServerMemory {
  /** max_held_bytes and max_held_bytes_per_connection. */
  readonly max: number;
  readonly share: number;
  readonly held: number;
  readonly kinds: Readonly<Record<HeldKind, number>>;
  /** Rollouts cancelled to stay within the budget. */
  readonly shed: number;
  /** A new session's account. */
  account(): SessionMemory;
  /** Whether `bytes` more fit the account's share and the total. */
  fits(account: SessionMemory, bytes: number): boolean;
  /** Why holding `bytes` more would pass a bound (naming it), or null. */
  refusal(account: SessionMemory, bytes: number, what: string): string | null;
}

/** The limits as `welcome.limits` sends them (PROTOCOL.md "Handshake"). */
export function wireLimits(limits: ServerLimits): Record<string, number> {
  return {
    max_frame_bytes: limits.maxFrameBytes,
    max_rollouts_per_connection: limits.maxRolloutsPerConnection,
    max_groups_per_rollout: limits.maxGroupsPerRollout,
    max_episodes_in_flight: limits.maxEpisodesInFlight,
    max_episodes_per_connection: limits.maxEpisodesPerConnection,
    max_buffered_groups: limits.maxBufferedGroups,
    max_unacked_groups: limits.maxUnackedGroups,
    max_env_sessions_per_connection: limits.maxEnvSessionsPerConnection,
    max_held_bytes: limits.maxHeldBytes,
    max_held_bytes_per_connection: Math.min(limits.maxHeldBytesPerConnection, limits.maxHeldBytes),
    // Their names before the budget covered every kind of session (the same values).
    max_env_bytes: limits.maxHeldBytes,
    max_env_bytes_per_connection: Math.min(limits.maxHeldBytesPerConnection, limits.maxHeldBytes),
    env_idle_s: limits.envIdleMs / 1000,
    send_pause_bytes: limits.sendPauseBytes,
    max_send_buffer_bytes: limits.maxSendBufferBytes,
    send_stall_s: limits.sendStallMs / 1000,
    resume_grace_s: limits.resumeGraceMs / 1000,
  };
}

export interface ServerState {
  options: ServerLimits & {
    token: string | null;
    /** The token a hello with role "trainer" must carry; null: the role is anyone's. */
    trainerToken: string | null;
    groupConcurrency: number;
    shutdownDeadlineMs: number;
  };
  config: RollgymConfig;
  registry: EnvRegistry;
  policy: Policy;
  metrics: ServerMetrics;
  sessions: Map<string, Session>;
  /** Episodes held over all sessions (see ServerLimits.maxEpisodesInFlight). */
  episodesInFlight: number;
  /** Bytes held over all sessions, by kind (see ServerLimits.maxHeldBytes). */
  memory: ServerMemory;
  closing: boolean;
  version: string;
  log: FastifyBaseLogger;
  rolloutContext: RolloutContext;
  /** The trainer's weight updates (updates.ts); also in rolloutContext. */
  updates: UpdateCoordinator;
  limits(): Record<string, number>;
}
