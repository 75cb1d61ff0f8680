// What the server's parts share: options, configuration, registry, policy, sessions, metrics.
import type { FastifyBaseLogger } from "fastify";
import type { EnvRegistry } from "../../envs/registry.ts";
import type { LimitValues } from "../../protocol/settings.ts";
import type { RollgymConfig } from "../config/index.ts";
import type { Policy } from "../llm/policy.ts";
import { limitDefaults } from "./limits.ts";
import type { ServerMetrics } from "./metrics.ts";
import type { RolloutContext } from "./rollouts.ts";
import type { HeldKind, Session, SessionMemory } from "./session.ts";
import type { UpdateCoordinator } from "./update-coordinator.ts";

/** The server's own limits (protocol/settings.ts LIMITS, part "server"), by option name. */
export type ServerLimits = LimitValues<"server">;

export const DEFAULT_LIMITS: ServerLimits = limitDefaults("server");

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
  /** The trainer's weight updates (update-coordinator.ts); also in rolloutContext. */
  updates: UpdateCoordinator;
  /** `welcome.limits`: a trainer's has the trainer-only limits too. */
  limits(trainer: boolean): Record<string, number>;
}
