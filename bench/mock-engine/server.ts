// A mock inference engine that speaks vLLM's OpenAI-compatible dialect over node:http, for
// load and fault-tolerance tests of a rollout engine: RAGEN-format answers from a built-in
// policy, a latency model (TTFT + per-token time, engine slots), and seeded fault injection.
import { randomUUID } from "node:crypto";
import { once } from "node:events";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { performance } from "node:perf_hooks";
import { setTimeout as delay } from "node:timers/promises";
import { pyFloatRepr } from "../../envs/pyrepr.ts";
import type { PolicyOptions } from "./answer.ts";
import { renderChat } from "./chat-template.ts";
import { ApiError, badRequest, httpError, modelNotFound } from "./errors.ts";
import { type Generation, generate } from "./generate.ts";
import {
  chatCompletionBody,
  chatRoleChunk,
  chatTokenChunk,
  completionBody,
  completionOffsets,
  completionTokenChunk,
  type ResponseContext,
  usageChunk,
} from "./responses.ts";
import { mixSeed, Rng } from "./rng.ts";
import { decode, encode, isValidId, tokenStr } from "./tokenizer.ts";
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
  /** Time to first token. Default 0. */
  ttftMs?: number;
  /** Time per further output token. Default 0. */
  tpotMs?: number;
  /** Each delay is scaled by a uniform factor in [1 - jitter, 1 + jitter]. Default 0. */
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
}

export interface MockEngineStats {
  /** Every HTTP request, on any route. */
  requests: number;
  /** Valid chat/completions requests: the ones faults are drawn for. */
  generations: number;
  /** Generations answered in full: a 200 body, or a stream that reached `data: [DONE]`. */
  completed: number;
  /** Of the completed, how many were streamed. */
  streamed: number;
  /** Refused by validation (400, 404, 405, 413, 501). */
  rejected: number;
  /** Injected 500s (a JSON error, or an error event mid-stream). */
  internalErrors: number;
  /** Injected 503s. */
  unavailable: number;
  /** Injected 429s. */
  rateLimited: number;
  /** Connections destroyed on purpose. */
  dropped: number;
  /** Requests given the slow tail. */
  slow: number;
  /** The client went away first (vLLM aborts such requests). */
  aborted: number;
  /** Malformed answers among the completed. */
  formatErrors: number;
  promptTokens: number;
  generationTokens: number;
  finishReasons: { stop: number; length: number; abort: number };
  running: number;
  waiting: number;
  peakRunning: number;
}

export interface MockEngine {
  /** Base URL including /v1, e.g. http://127.0.0.1:PORT/v1. */
  url: string;
  port: number;
  close(): Promise<void>;
  stats(): MockEngineStats;
}

interface Config {
  port: number;
  models: string[];
  maxModelLen: number;
  maxLogprobs: number;
  seed: number;
  ttftMs: number;
  tpotMs: number;
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
  const config: Config = {
    port: checkRange("port", o.port ?? 0, 0, 65535, true),
    models,
    maxModelLen: checkRange("maxModelLen", o.maxModelLen ?? 32768, 1, 2 ** 31, true),
    maxLogprobs: checkRange("maxLogprobs", o.maxLogprobs ?? 20, -1, 2 ** 31, true),
    seed: checkRange("seed", o.seed ?? 0, 0, 2 ** 32 - 1, true),
    ttftMs: checkRange("ttftMs", o.ttftMs ?? 0, 0, 3_600_000),
    tpotMs: checkRange("tpotMs", o.tpotMs ?? 0, 0, 3_600_000),
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
  };
  if (o.answerActions !== undefined && o.answerActions !== 1 && o.answerActions !== 2)
    throw new RangeError(`answerActions must be 1 or 2, got ${String(o.answerActions)}`);
  // The failure outcomes are exclusive, so their rates must fit in one request's chances.
  if (config.errorRate + config.rateLimitRate + config.dropRate > 1 + 1e-12)
    throw new RangeError("errorRate + rateLimitRate + dropRate must be at most 1");
  return config;
}

type Fault = "none" | "internal-error" | "unavailable" | "rate-limit" | "drop";

interface Plan {
  fault: Fault;
  slow: boolean;
  /** Jitter draws for this request. */
  rng: Rng;
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

function emptyStats(): MockEngineStats {
  return {
    requests: 0,
    generations: 0,
    completed: 0,
    streamed: 0,
    rejected: 0,
    internalErrors: 0,
    unavailable: 0,
    rateLimited: 0,
    dropped: 0,
    slow: 0,
    aborted: 0,
    formatErrors: 0,
    promptTokens: 0,
    generationTokens: 0,
    finishReasons: { stop: 0, length: 0, abort: 0 },
    running: 0,
    waiting: 0,
    peakRunning: 0,
  };
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (ms <= 0) {
    signal.throwIfAborted();
    return Promise.resolve();
  }
  return delay(ms, undefined, { signal });
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
};

export async function startMockEngine(options: MockEngineOptions = {}): Promise<MockEngine> {
  const config = resolveConfig(options);
  const stats = emptyStats();
  const slots = new Slots(config.maxConcurrency);
  const startedAt = Math.floor(Date.now() / 1000);
  let generationIndex = 0;
  let closing: Promise<void> | null = null;

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
    return { fault, slow, rng };
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
    sendJson(res, error.status, error.body(), headers);
  }

  async function write(res: ServerResponse, text: string, signal: AbortSignal): Promise<void> {
    signal.throwIfAborted();
    // Respect backpressure: a slow reader must not make the mock buffer without bound.
    if (!res.write(text)) await once(res, "drain", { signal });
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

  function metricsText(): string {
    const labels = `engine="0",model_name="${config.models[0].replaceAll("\\", "\\\\").replaceAll('"', '\\"')}"`;
    const lines: string[] = [];
    const metric = (name: string, type: string, help: string, samples: [string, number][]): void => {
      lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
      for (const [extra, value] of samples) lines.push(`${name}{${extra}${labels}} ${pyFloatRepr(value)}`);
    };
    metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", [
      ["", stats.running],
    ]);
    metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", [
      ["", stats.waiting],
    ]);
    const usage = Number.isFinite(config.maxConcurrency) ? stats.running / config.maxConcurrency : 0;
    metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", [["", usage]]);
    metric("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", [
      ["", stats.promptTokens],
    ]);
    metric("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", [
      ["", stats.generationTokens],
    ]);
    metric(
      "vllm:request_success_total",
      "counter",
      "Count of successfully processed requests.",
      (["stop", "length", "abort"] as const).map((r) => [`finished_reason="${r}",`, stats.finishReasons[r]]),
    );
    metric("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.", [
      ["", 0],
    ]);
    // Not vLLM's: what the mock did on purpose, for load-test dashboards.
    metric("mock_engine:injected_faults_total", "counter", "Faults injected by the mock engine.", [
      ['kind="internal_error",', stats.internalErrors],
      ['kind="unavailable",', stats.unavailable],
      ['kind="rate_limit",', stats.rateLimited],
      ['kind="drop",', stats.dropped],
      ['kind="slow",', stats.slow],
    ]);
    metric("mock_engine:format_errors_total", "counter", "Malformed answers served on purpose.", [
      ["", stats.formatErrors],
    ]);
    return `${lines.join("\n")}\n`;
  }

  function renderPrompt(parsed: GenerationRequest): { text: string; ids: number[] } {
    if (parsed.kind === "chat") {
      const text = renderChat(parsed.messages, {
        addGenerationPrompt: parsed.addGenerationPrompt,
        continueFinalMessage: parsed.continueFinalMessage,
        kwargs: parsed.templateKwargs,
      });
      return { text, ids: encode(text) };
    }
    if ("text" in parsed.prompt) {
      if (parsed.prompt.text === "") throw badRequest("The decoder prompt cannot be empty");
      return { text: parsed.prompt.text, ids: encode(parsed.prompt.text) };
    }
    const ids = parsed.prompt.ids;
    const bad = ids.find((id) => !isValidId(id));
    if (bad !== undefined) throw badRequest(`Token id ${bad} is out of vocabulary`, "prompt");
    // Token prompts are not re-tokenized; the policy reads their text.
    return { text: decode(ids), ids: [...ids] };
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
    const maxTokens = checkLimits(parsed, prompt.ids.length, config);
    const requestId =
      headerValue(req, "x-request-id") || parsed.requestId || randomUUID().replaceAll("-", "");
    const idHeader = { "x-request-id": requestId };

    const index = generationIndex++;
    stats.generations++;
    const plan = planFor(index);
    // Refusals that happen before any work: both tell the client to come back in a second.
    const refusal =
      plan.fault === "rate-limit"
        ? { status: 429, text: "Too Many Requests", count: () => stats.rateLimited++ }
        : plan.fault === "unavailable"
          ? { status: 503, text: "Service Unavailable", count: () => stats.unavailable++ }
          : null;
    if (refusal) {
      refusal.count();
      sendError(res, httpError(refusal.status, refusal.text), {
        ...idHeader,
        "retry-after": "1",
        "x-mock-fault": plan.fault,
      });
      return;
    }

    // Same request + same seed ⇒ same answer; temperature 0 is greedy; otherwise a fresh draw.
    const answerSeed =
      parsed.seed !== null
        ? mixSeed("seed", parsed.seed, prompt.text)
        : parsed.temperature === 0
          ? mixSeed("greedy", prompt.text)
          : mixSeed(config.seed, "sample", index);

    const controller = new AbortController();
    const signal = controller.signal;
    let droppedOnPurpose = false;
    res.on("close", () => {
      if (!res.writableFinished) controller.abort();
    });

    stats.waiting++;
    try {
      await slots.acquire(signal);
    } catch {
      stats.waiting--;
      stats.aborted++;
      stats.finishReasons.abort++;
      return;
    }
    stats.waiting--;
    stats.running++;
    stats.peakRunning = Math.max(stats.peakRunning, stats.running);
    let sentTokens = 0;
    try {
      stats.promptTokens += prompt.ids.length;
      const gen: Generation = generate(
        {
          promptText: prompt.text,
          promptIds: prompt.ids,
          maxTokens,
          minTokens: parsed.minTokens,
          stop: parsed.stop,
          stopTokenIds: parsed.stopTokenIds,
          ignoreEos: parsed.ignoreEos,
          skipSpecialTokens: parsed.skipSpecialTokens,
          includeStopStr: parsed.includeStopStr,
          logprobs: parsed.logprobs,
          promptLogprobs: parsed.promptLogprobs,
        },
        new Rng(answerSeed),
        new Rng(mixSeed(answerSeed, "logprobs")),
        config.policy,
      );
      const ctx: ResponseContext = {
        id: requestId,
        created: Math.floor(Date.now() / 1000),
        model,
        req: parsed,
        promptIds: prompt.ids,
        gen,
      };
      const n = gen.tokenIds.length;
      if (plan.slow) stats.slow++;
      await sleep(jittered(config.ttftMs, plan.rng) + (plan.slow ? config.slowMs : 0), signal);

      const fails = plan.fault === "drop" || plan.fault === "internal-error";
      if (!parsed.stream) {
        // Failures strike halfway through decoding; success waits for the last token.
        const decodeTokens = fails ? Math.floor((n - 1) / 2) : n - 1;
        await sleep(jittered(config.tpotMs * decodeTokens, plan.rng), signal);
        if (plan.fault === "drop") {
          droppedOnPurpose = true;
          stats.dropped++;
          req.socket.destroy();
          return;
        }
        if (plan.fault === "internal-error") {
          stats.internalErrors++;
          sendError(res, new ApiError(500, "InternalServerError", "Internal server error"), {
            ...idHeader,
            "x-mock-fault": "internal-error",
          });
          return;
        }
        sendJson(res, 200, kind === "chat" ? chatCompletionBody(ctx) : completionBody(ctx), idHeader);
        sentTokens = n;
        stats.completed++;
        stats.finishReasons[gen.finishReason]++;
        if (gen.answer.formatError) stats.formatErrors++;
        return;
      }

      res.writeHead(200, {
        "content-type": "text/event-stream; charset=utf-8",
        "cache-control": "no-cache",
        ...idHeader,
      });
      const event = (data: unknown): string => `data: ${JSON.stringify(data)}\n\n`;
      const offsets = kind === "completion" ? completionOffsets(ctx) : [];
      if (kind === "chat") await write(res, event(chatRoleChunk(ctx)), signal);
      // A failing stream breaks after about half of its tokens.
      const upTo = fails ? Math.floor(n / 2) : n;
      let due = performance.now();
      for (let i = 0; i < upTo; i++) {
        if (i > 0 && config.tpotMs > 0) {
          due += jittered(config.tpotMs, plan.rng);
          await sleep(due - performance.now(), signal);
        }
        await write(
          res,
          event(kind === "chat" ? chatTokenChunk(ctx, i) : completionTokenChunk(ctx, i, offsets)),
          signal,
        );
        sentTokens = i + 1;
      }
      if (plan.fault === "drop") {
        droppedOnPurpose = true;
        stats.dropped++;
        req.socket.destroy();
        return;
      }
      if (plan.fault === "internal-error") {
        // The status is already 200: vLLM reports the failure as an error event, then [DONE].
        stats.internalErrors++;
        const error = new ApiError(500, "InternalServerError", "Internal server error");
        await write(res, event(error.body()), signal);
        res.end("data: [DONE]\n\n");
        return;
      }
      if (parsed.includeUsage) await write(res, event(usageChunk(ctx, n)), signal);
      res.end("data: [DONE]\n\n");
      stats.completed++;
      stats.streamed++;
      stats.finishReasons[gen.finishReason]++;
      if (gen.answer.formatError) stats.formatErrors++;
    } catch (error) {
      if (!signal.aborted) throw error;
      if (!droppedOnPurpose) {
        stats.aborted++;
        stats.finishReasons.abort++;
      }
    } finally {
      stats.generationTokens += sentTokens;
      stats.running--;
      slots.release();
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
          })
        : parsed.prompt;
    const tokens = encode(text);
    sendJson(res, 200, {
      count: tokens.length,
      max_model_len: config.maxModelLen,
      tokens,
      token_strs: parsed.returnTokenStrs ? tokens.map(tokenStr) : null,
    });
  }

  function handleDetokenize(res: ServerResponse, body: JsonObject): void {
    const parsed = parseDetokenizeRequest(body);
    resolveModel(parsed.model);
    const bad = parsed.tokens.find((id) => !isValidId(id));
    if (bad !== undefined) throw badRequest(`Token id ${bad} is out of vocabulary`, "tokens");
    sendJson(res, 200, { prompt: decode(parsed.tokens) });
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    stats.requests++;
    res.on("error", () => {}); // a client that vanished mid-write is handled via "close"
    const path = new URL(req.url ?? "/", "http://mock").pathname;
    const methods = ROUTES[path];
    const echoId = headerValue(req, "x-request-id");
    try {
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
          case "/metrics": {
            const text = metricsText();
            res.writeHead(200, { "content-type": "text/plain; version=0.0.4; charset=utf-8", ...headers });
            res.end(text);
            return;
          }
        }
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

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(config.port, "127.0.0.1", () => {
      server.off("error", reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;

  return {
    url: `http://127.0.0.1:${port}/v1`,
    port,
    stats: (): MockEngineStats => structuredClone(stats),
    close(): Promise<void> {
      closing ??= new Promise<void>((resolve) => {
        const force = setTimeout(() => server.closeAllConnections(), config.closeGraceMs);
        force.unref();
        server.close(() => {
          clearTimeout(force);
          resolve();
        });
        server.closeIdleConnections();
      });
      return closing;
    },
  };
}
