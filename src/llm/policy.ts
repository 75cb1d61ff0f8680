// The Policy interface every model backend implements: given the chat so far, produce the
// next assistant turn. Built-in policies also receive the episode's solver; remote ones
// ignore it.
import type { ResolvedTag } from "../../envs/registry.ts";
import type { ChatMessage } from "../rollout/prompt.ts";
import type { ReplicaSnapshot } from "./replicas.ts";
import type { TokenEngine } from "./token-engine.ts";

export interface SamplingParams {
  temperature: number;
  top_p: number;
  /** -1 disables (vLLM). */
  top_k: number;
  min_p: number;
  /** Sent explicitly, so a server's generation-config defaults never change the policy (RAGEN: 1, 0, 0). */
  repetition_penalty: number;
  presence_penalty: number;
  frequency_penalty: number;
  max_tokens: number;
  /** Per-request seed derived from (batch seed, env id, turn), so deterministic engines reproduce. */
  seed: number;
  stop?: string[];
}

/** What a built-in policy may know about the episode; remote policies never see it. */
export interface EpisodeView {
  tag: string;
  envId: number;
  turn: number;
  /** The current episode's action names (Bandit's change per seed). */
  actionNames: readonly string[];
  /** Actions still allowed in this turn (max_actions_per_turn, capped by the budget). */
  actionsThisTurn: number;
  /** agent_proxy.action_sep, which answers join their actions with. Default "||". */
  actionSep?: string;
  think: boolean;
  /** A shortest plan from the current state (action names), or null when none is known. */
  solve(): string[] | null;
}

export interface PolicyRequest {
  messages: readonly ChatMessage[];
  /** Text the generation prompt ends with ("<think>" or "<answer>"), as RAGEN appends it. */
  prefill: string;
  sampling: SamplingParams;
  episode: EpisodeView;
  /** Keeps an episode's turns on one engine replica (its prefix cache); unique per live episode. */
  affinity?: string;
  signal?: AbortSignal;
}

export interface PolicyResponse {
  /** The generated text only, without the prefill. */
  text: string;
  finishReason: string;
  promptTokens?: number;
  completionTokens?: number;
  /** Attempts it took (retries + 1), for reports. */
  attempts?: number;
  /**
   * The engine split the text into reasoning and content in a way that cannot be undone exactly
   * (e.g. `content: null`); `text` is the best reading and the turn is flagged.
   */
  ambiguousSplit?: boolean;
}

/** Counts prompt tokens exactly as the engine will, so prompts can be fitted to its context. */
export interface PromptMeter {
  /** Context length in tokens: prompt + max_tokens must not exceed it. */
  readonly limit: number;
  /** Tokens of the prompt the request for `messages` (plus the prefill) would render. */
  count(
    messages: readonly ChatMessage[],
    prefill: string,
    signal?: AbortSignal,
    /** The episode's routing key, so the count goes to its replica. */
    affinity?: string,
  ): Promise<number>;
  /** Told when a prompt was fitted on an upper bound instead of a count (for stats). */
  fittedByBound?(): void;
}

export interface Policy {
  readonly name: string;
  generate(request: PolicyRequest): Promise<PolicyResponse>;
  /** Present when the policy knows its context window and can count tokens (remote engines). */
  readonly meter?: PromptMeter | null;
  /** Token in, token out against the same engine (remote policies after preflight). */
  tokenEngine?(): TokenEngine | null;
  /** Engine replicas and their load, for metrics (remote policies). */
  replicas?(): ReplicaSnapshot[];
  /** The episode behind `affinity` is over (frees routing state). */
  forget?(affinity: string): void;
  /** Why the policy cannot play these tags as its name promises (null: it can). */
  cannotPlay?(tags: readonly ResolvedTag[]): string | null;
  close?(): Promise<void>;
}

/** A generation that failed for good (after retries); the episode is reported failed with it. */
export class PolicyError extends Error {
  readonly retryable: boolean;
  constructor(message: string, retryable = false) {
    super(message);
    this.name = "PolicyError";
    this.retryable = retryable;
  }
}

/** 32-bit mix of (batch seed, env id, turn) for per-request sampling seeds (murmur3 finaliser). */
export function requestSeed(batchSeed: number, envId: number, turn: number): number {
  let h = batchSeed >>> 0;
  for (const part of [envId, turn]) {
    h = Math.imul(h ^ (part >>> 0), 0x9e3779b1);
    h ^= h >>> 15;
  }
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}
