// The Policy interface every model backend implements: given the chat so far, produce the
// next assistant turn. Built-in policies also receive the episode's solver; remote ones
// ignore it.
import type { ResolvedTag } from "../../envs/registry.ts";
import { RollgymError } from "../errors/catalogue.ts";
import type { ChatMessage, SamplingParams } from "./chat.ts";
import type { HistoryJson } from "./history-json.ts";
import type { ReplicaSnapshot } from "./replicas.ts";
import type { TokenEngine } from "./token-engine.ts";
import type { TurnVersions, WeightUpdates } from "./versions.ts";

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
  /** The context length the prompt and max_tokens were fitted to, when they were (see ContextLimitChanged). */
  fittedTo?: number;
  /** The episode's messages as JSON so far, extended turn by turn (one per episode; engine policies use it). */
  history?: HistoryJson;
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
  /** The weight versions in force at dispatch and at completion (policies with updates()). */
  versions?: TurnVersions;
}

/**
 * Template tokens allowed per message added to a known prompt: the role header and end marker
 * (ChatML: "<|im_start|>assistant\n" … "<|im_end|>\n", 5 tokens), with room to spare for
 * other templates and for merges across the seams. See docs/rollouts.md, "Counting less".
 */
export const TEMPLATE_TOKENS_PER_MESSAGE = 32;

/**
 * Tokens a chat template may add of its own once per prompt: BOS, a default system prompt when
 * none is sent (Qwen2.5: about 20), the tool-use instructions around `tools` (Qwen2.5: about 90).
 */
export const TEMPLATE_OWN_TOKENS = 256;

/** Tokens `messages` can take at most inside a prompt: their UTF-8 bytes plus the template's per message. */
export function messagesBound(messages: readonly ChatMessage[]): number {
  let bound = 0;
  for (const message of messages)
    bound += Buffer.byteLength(message.content, "utf8") + TEMPLATE_TOKENS_PER_MESSAGE;
  return bound;
}

/**
 * An upper bound on the tokens of a whole chat prompt without asking the engine: every token of
 * a byte-level BPE covers at least one byte, each message and the generation prompt get
 * TEMPLATE_TOKENS_PER_MESSAGE, the template TEMPLATE_OWN_TOKENS, and rendering fields that
 * reach the template (tools, documents) their JSON bytes plus TEMPLATE_TOKENS_PER_MESSAGE per
 * entry. Loose (text runs 3–4 bytes per token), and sound under the same assumptions as the
 * bound in docs/rollouts.md, "Counting less".
 */
export function promptUpperBound(
  messages: readonly ChatMessage[],
  prefill: string,
  rendering: Readonly<Record<string, unknown>> = {},
): number {
  let bound =
    TEMPLATE_OWN_TOKENS +
    TEMPLATE_TOKENS_PER_MESSAGE +
    Buffer.byteLength(prefill, "utf8") +
    messagesBound(messages);
  for (const value of Object.values(rendering)) {
    if (value === undefined || value === null) continue;
    bound += Buffer.byteLength(JSON.stringify(value), "utf8");
    if (Array.isArray(value)) bound += value.length * TEMPLATE_TOKENS_PER_MESSAGE;
  }
  return bound;
}

/**
 * Counts prompt tokens exactly as the engine will (or, where the engine cannot count, bounds
 * them from above), so prompts can be fitted to its context.
 */
export interface PromptMeter {
  /** Context length in tokens: prompt + max_tokens must not exceed it. */
  readonly limit: number;
  /** Tokens of the prompt the request for `messages` (plus the prefill) would render, or an upper bound. */
  count(
    messages: readonly ChatMessage[],
    prefill: string,
    signal?: AbortSignal,
    /** The episode's routing key, so the count goes to its replica. */
    affinity?: string,
    /** The episode's messages as JSON so far (PolicyRequest.history). */
    history?: HistoryJson,
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
  /** What the policy is waiting on at the engine right now (remote policies). */
  engineStatus?(): EngineStatus;
  /** The episode behind `affinity` is over (frees routing state). */
  forget?(affinity: string): void;
  /** Pauses and resumes the engines around the trainer's weight updates (issue #22). */
  updates?(): WeightUpdates;
  /** Why the policy cannot play these tags as its name promises (null: it can). */
  cannotPlay?(tags: readonly ResolvedTag[]): string | null;
  close?(): Promise<void>;
}

/** Requests waiting on the engine at one moment: retries in backoff and replicas out of routing. */
export interface EngineStatus {
  /** Requests waiting to be tried again after a transient fault. */
  retrying: number;
  /** Requests waiting for a healthy replica. */
  waiting_for_replica: number;
  replicas: number;
  replicas_down: number;
  /** The latest transient fault, while requests are waiting; null otherwise. */
  last_error: string | null;
}

/** One line for a progress display, or null when nothing waits on the engine. */
export function describeEngineStatus(status: EngineStatus | undefined): string | null {
  if (!status) return null;
  const parts: string[] = [];
  if (status.replicas_down > 0) parts.push(`${status.replicas_down}/${status.replicas} replicas down`);
  if (status.retrying > 0) parts.push(`${status.retrying} requests retrying`);
  if (status.waiting_for_replica > 0) parts.push(`${status.waiting_for_replica} waiting for a replica`);
  if (parts.length === 0) return null;
  return `waiting on the engine: ${parts.join(", ")}${status.last_error ? ` (last error: ${status.last_error})` : ""}`;
}

/** PolicyError's codes: preflight's refusals (no endpoint answers, none serves the model) have their own. */
export type PolicyErrorCode = "policy_failed" | "engine_unreachable" | "model_not_served";

/** A generation that failed for good (after retries); the episode is reported failed with it. */
export class PolicyError extends RollgymError<PolicyErrorCode> {
  readonly retryable: boolean;
  constructor(message: string, retryable = false, code: PolicyErrorCode = "policy_failed") {
    super(code, { message });
    this.name = "PolicyError";
    this.retryable = retryable;
  }
}

/**
 * The engine refused a turn for length because its context length fell (a replica restarted
 * with a smaller one) below the one the turn was fitted to: the turn is fitted again, once.
 */
export class ContextLimitChanged extends PolicyError {
  readonly before: number;
  readonly after: number;
  constructor(before: number, after: number, url: string) {
    super(`the context length fell from ${before} to ${after} tokens (${url} now reports ${after})`);
    this.name = "ContextLimitChanged";
    this.before = before;
    this.after = after;
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
