// The life of one generation request, shared by POST /v1/chat/completions and POST
// /v1/completions (their differences are a Dialect, in chat-completions.ts and completions.ts):
// validation against the limits, the fault drawn for it, the queue for an engine slot and the
// pause gate, decode steps from the virtual-time scheduler (scheduler.ts), then the answer as a
// JSON body or an SSE stream, ended early by a fault, /pause?mode=abort or the client leaving.
import { randomUUID } from "node:crypto";
import type { EngineCore } from "../core.ts";
import { ApiError, httpError } from "../errors.ts";
import { jittered, planFor } from "../faults.ts";
import { type Generation, generate, truncateGeneration } from "../generate.ts";
import {
  drained,
  errorEvent,
  type Headers,
  headerValue,
  retryAfter,
  sendError,
  sendJson,
  sseEvent,
  write,
} from "../http.ts";
import { drawResponseTokens } from "../latency.ts";
import type { EngineConfig } from "../options.ts";
import type { Inflight } from "../pause.ts";
import type { ReasoningSplit } from "../reasoning.ts";
import { type ResponseContext, usageChunk } from "../responses.ts";
import { mixSeed, Rng } from "../rng.ts";
import type { DecodeJob } from "../scheduler.ts";
import { checkLimits, type GenerationRequest, type JsonObject } from "../validate.ts";
import type { WeightsTracker } from "../weights.ts";
import type { Route, RouteRequest } from "./route.ts";

/** A stream's chunk for a choice at a decode step. */
export type TokenChunks = (choice: number, step: number) => unknown;

/** What differs between the chat and the completions route. */
export interface Dialect<R extends GenerationRequest> {
  parse(body: JsonObject): R;
  /** The prompt as the engine sees it: its text (what the policy reads) and ids (what it counts). */
  prompt(parsed: R, core: EngineCore): { text: string; ids: number[] };
  /** The reasoning parser's split of a choice's text, or null where none runs. */
  split(parsed: R, text: string, config: EngineConfig): ReasoningSplit | null;
  /** The non-streaming body. */
  body(ctx: ResponseContext): unknown;
  /** Chunks sent before a choice's first token. */
  openChunks(ctx: ResponseContext, choice: number): unknown[];
  /** The token chunks of a stream, for the choices as generated. */
  tokenChunks(ctx: ResponseContext): TokenChunks;
  /** The final chunk of a choice cut short (finish_reason "abort"). */
  abortChunk(ctx: ResponseContext, choice: number): unknown;
  /**
   * `max_tokens: null` passes validation, then trips `assert request.max_tokens is not None`
   * (vLLM's completion/serving.py:333, :504): a 500, or a stream that fails at its first output.
   */
  assertsMaxTokens: boolean;
}

function streamHeaders(headers: Headers): Headers {
  return { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache", ...headers };
}

export function generationRoute<R extends GenerationRequest>(core: EngineCore, dialect: Dialect<R>): Route {
  const { config, tokenizer, stats, scheduler, slots, pause, weights, prefixCache } = core;
  const limits = { ...config, vocabSize: tokenizer.vocabSize };
  const lengths = config.latency.responseTokens;

  async function handle({ req, res, body }: RouteRequest): Promise<void> {
    const parsed = dialect.parse(body);
    const model = core.resolveModel(parsed.model);
    const prompt = dialect.prompt(parsed, core);
    const sampling = checkLimits(parsed, prompt.ids, limits);
    const requestId =
      headerValue(req, "x-request-id") || parsed.requestId || randomUUID().replaceAll("-", "");
    const headers: Headers = { "x-request-id": requestId };
    if (sampling.applied.length > 0) headers["x-mock-defaults-applied"] = sampling.applied.join(",");

    // The k-th valid generation request (either route): what its faults are drawn for.
    const index = stats.generations++;
    if (sampling.applied.length > 0) {
      stats.defaultsApplied++;
      for (const field of sampling.applied) stats.defaultsAppliedByField[field]++;
    }
    const plan = planFor(config, index);
    // Refusals that happen before any work: both tell the client to come back later.
    const refusal =
      plan.fault === "rate-limit"
        ? { status: 429, text: "Too Many Requests", count: () => stats.rateLimited++ }
        : plan.fault === "unavailable"
          ? { status: 503, text: "Service Unavailable", count: () => stats.unavailable++ }
          : null;
    if (refusal) {
      refusal.count();
      sendError(res, httpError(refusal.status, refusal.text), config.errorShape, {
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
      cachedTokens: () => prompt.ids.length + (job?.produced ?? 0),
    };
    pause.inflight.add(entry);
    if (pause.mode !== null) stats.arrivedWhilePaused++;

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

    function context(reported: readonly Generation[]): ResponseContext {
      const splits = reported.map((g) => dialect.split(parsed, g.text, config));
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

    // The engine-side record of which weights made each token (tests read it, rollgym never).
    let tracker: WeightsTracker | null = null;
    let recorded = false;
    function record(reported: readonly Generation[], finishReason: string): void {
      if (recorded) return;
      recorded = true;
      weights.finish(
        tracker,
        {
          id: requestId,
          prompt_ids: prompt.ids,
          cache_salt: parsed.cacheSalt,
          session: headerValue(req, "x-session-id") ?? null,
          finish_reason: finishReason,
        },
        reported.map((g) => g.tokenIds),
      );
    }

    /** A 200 whose choices stopped after `count` steps (finish_reason "abort" where cut). */
    function respondAborted(count: number): void {
      const reported = partial(count);
      record(reported, "abort");
      sendJson(res, 200, dialect.body(context(reported)), headers);
      sentTokens = reported.reduce((s, g) => s + g.tokenIds.length, 0);
      stats.completed++;
      tally(reported);
    }

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

    /**
     * Queue the chunks of decode step `t` (one token of every choice still going); true when
     * the socket asks the writer to wait for "drain" before the next step.
     */
    function streamStep(tokenChunk: TokenChunks, t: number): boolean {
      signal.throwIfAborted();
      let full = false;
      for (let c = 0; c < gens.length; c++) {
        if (t >= gens[c].tokenIds.length) continue;
        if (!res.write(sseEvent(tokenChunk(c, t)))) full = true;
        sentTokens++;
      }
      return full;
    }

    /** The status line of a stream, and what opens each choice (chat's role chunks). */
    async function startStream(ctx: ResponseContext): Promise<void> {
      res.writeHead(200, streamHeaders(headers));
      streamStarted = true;
      for (let c = 0; c < gens.length; c++)
        for (const chunk of dialect.openChunks(ctx, c)) await write(res, sseEvent(chunk), signal);
    }

    /** End a stream whose choices stopped after `count` steps: abort chunks, usage, [DONE]. */
    function endAbortedStream(count: number): void {
      const reported = partial(count);
      record(reported, "abort");
      const ctx = context(reported);
      let text = "";
      reported.forEach((g, c) => {
        // vLLM sends no final chunk for a choice that produced nothing.
        if (g.finishReason === "abort" && g.tokenIds.length > 0) text += sseEvent(dialect.abortChunk(ctx, c));
      });
      if (parsed.includeUsage) text += sseEvent(usageChunk(ctx));
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
        res.writeHead(200, streamHeaders(headers));
        const ctx = context(gens);
        for (let c = 0; c < gens.length; c++)
          for (const chunk of dialect.openChunks(ctx, c)) res.write(sseEvent(chunk));
      }
      endAbortedStream(count);
    }

    stats.waiting++;
    let holdsSlot = false;
    try {
      // Queued until a slot is free and the engine is not paused (a slot taken while a pause
      // began is given back, so the FIFO order holds).
      for (;;) {
        await pause.gate(signal);
        await slots.acquire(signal);
        if (pause.mode === null) break;
        slots.release();
      }
      holdsSlot = true;
    } catch {
      stats.waiting--;
      pause.inflight.delete(entry);
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
      prefixCache.lookup(parsed.cacheSalt, prompt.ids);
      tracker = weights.start(() => job?.produced ?? 0);
      for (let c = 0; c < parsed.n; c++) gens.push(generateChoice(c));
      if (plan.fault === "abort") headers["x-mock-fault"] = "abort";
      const ctx0 = context(gens);
      const tokenChunk = parsed.stream ? dialect.tokenChunks(ctx0) : null;
      const steps = Math.max(...gens.map((g) => g.tokenIds.length));
      if (plan.slow) stats.slow++;

      const fails = plan.fault === "drop" || plan.fault === "internal-error";
      // Failures strike about halfway; an injected abort after a seeded share of the steps.
      let upTo = steps;
      if (fails) upTo = parsed.stream ? Math.floor(steps / 2) : Math.floor((steps - 1) / 2) + 1;
      if (plan.fault === "abort") upTo = Math.floor(plan.abortAt * steps);
      const assertFails = dialect.assertsMaxTokens && parsed.maxTokensNull;
      if (assertFails && parsed.stream) upTo = 0;

      const totalTokens = gens.reduce((sum, g) => sum + g.tokenIds.length, 0);
      job = scheduler.add({
        prefillMs: jittered(config.latency.ttftMs, config.jitter, plan.rng) + (plan.slow ? config.slowMs : 0),
        steps: upTo,
        speed: 1 / Math.max(0.01, jittered(1, config.jitter, plan.rng)),
        weight: totalTokens / steps,
        onProgress: parsed.stream ? wake : undefined,
        onDone: wake,
      });
      // The scheduler makes the steps; this loop passes them on (a stream token by token, as
      // the client reads them) and sleeps until the next wake-up in between.
      for (;;) {
        if (tokenChunk && (job.produced > 0 || job.done)) {
          // The status line and the role chunks go out with the first token, as vLLM's do.
          if (!streamStarted) await startStream(ctx0);
          while (produced < job.produced) {
            const full = streamStep(tokenChunk, produced);
            // Counted once queued: a client may read the step and leave while this waits for
            // "drain", and the record must hold every id it kept.
            produced++;
            if (full) await drained(res, signal);
          }
        }
        if (!parsed.stream) produced = job.produced;
        if (job.done && produced >= upTo) break;
        await nextWake();
      }
      await pause.keepGate(signal);

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
          sendError(res, error, config.errorShape, { ...headers, "x-mock-fault": "internal-error" });
          return;
        }
        // The status is already 200: vLLM reports the failure as an error event, then [DONE].
        await write(res, sseEvent(errorEvent(error, config.errorShape)), signal);
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
          sendError(res, error, config.errorShape, headers);
          return;
        }
        await write(res, sseEvent(errorEvent(error, config.errorShape)), signal);
        res.end("data: [DONE]\n\n");
        return;
      }
      const ctx = context(gens);
      record(gens, gens[0]?.finishReason ?? "stop");
      if (!parsed.stream) {
        sendJson(res, 200, dialect.body(ctx), headers);
        sentTokens = gens.reduce((s, g) => s + g.tokenIds.length, 0);
        stats.completed++;
        tally(gens);
        return;
      }
      if (parsed.includeUsage) await write(res, sseEvent(usageChunk(ctx)), signal);
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
        // What the engine made before the client left (a stream: what it passed on).
        record(partial(produced), "client_closed");
        return;
      }
      // /pause?mode=abort: the request ends at once, 200, with what it generated so far.
      stats.pauseAborts++;
      abortNow(produced);
    } finally {
      if (tracker !== null && !recorded) record(partial(produced), "error");
      if (job !== null) scheduler.remove(job);
      signal.removeEventListener("abort", onAbort);
      stats.generationTokens += sentTokens;
      stats.running--;
      if (holdsSlot) slots.release();
      pause.inflight.delete(entry);
      finish();
    }
  }

  return { methods: ["POST"], json: true, handle };
}
