// The OpenAI-compatible chat policy (vLLM in production, llama.cpp in tests). Every sampling
// field a server default could change is sent explicitly; the generation prompt's "<think>"
// is sent as an assistant prefill the server continues (vLLM's continue_final_message).
// Requests go to the least-loaded healthy replica, an episode's turns stay on one replica,
// and a turn is retried (connection errors, 408/409/429/5xx, `abort` answers) within a time
// budget that rides out an engine restart; when every replica is down, turns wait on the
// pool's probe instead of hammering it.
import { setTimeout as sleep } from "node:timers/promises";
import { ContextLimit, isLengthRefusal } from "./context-limit.ts";
import { type Deadline, deadline, type PauseClock } from "./deadline.ts";
import { type Dialect, describeEngine, type EngineInfo, EngineTokenCounter } from "./engine.ts";
import { type Dispatch, EngineUpdates, type Sent, UpdateInterrupted } from "./engine-updates.ts";
import { extraBodyProblem, renderingFields, requestExtras } from "./extra-body.ts";
import { checkFinishReason, samplingFields } from "./generation.ts";
import { HistoryJson } from "./history-json.ts";
import { EngineConnections, EngineError, JsonText, requestJson, UnusableAnswer, utf8Length } from "./http.ts";
import {
  ContextLimitChanged,
  type EngineStatus,
  type Policy,
  PolicyError,
  type PolicyRequest,
  type PolicyResponse,
  type PromptMeter,
  promptUpperBound,
} from "./policy.ts";
import { type Lease, ReplicaPool } from "./replicas.ts";
import { type EngineTransport, TokenEngine } from "./token-engine.ts";
import type { WeightUpdates } from "./versions.ts";

export interface ChatPolicyOptions {
  /** One base URL per engine replica (…/v1). */
  baseURL: string | readonly string[];
  model: string;
  apiKey?: string | null;
  /** Requests in flight per replica at most. */
  concurrency?: number;
  /** Timeout of one request. */
  timeoutMs?: number;
  /** Wall time a turn may spend on retries and waiting for a replica before it fails. */
  retryBudgetMs?: number;
  /** Optional cap on attempts per turn (retries + 1 ≤ maxRetries + 1); null = the time budget alone. */
  maxRetries?: number | null;
  /** First backoff; doubles per retry up to maxBackoffMs (a Retry-After answer overrides it). */
  backoffMs?: number;
  maxBackoffMs?: number;
  /**
   * "continue": send the prefill as a final assistant message the server continues (vLLM:
   * continue_final_message). "none": send no prefill; the model writes its own tags.
   */
  prefill?: "continue" | "none";
  /** The engine's request dialect; "auto" asks the first replica at preflight. */
  dialect?: Dialect | "auto";
  /**
   * Merged into every request body last (e.g. chat_template_kwargs, vLLM's structured_outputs);
   * fields rollgym sets per turn are refused (see extraBodyProblem).
   */
  extraBody?: Record<string, unknown>;
  /** A GBNF grammar, sent as llama.cpp's `grammar` or vLLM's `structured_outputs.grammar`. */
  grammar?: string | null;
  /** Configured context length; "auto" (default) takes the engine's. The smaller one wins. */
  maxModelLen?: number | "auto";
  /** Consecutive failures that take a replica out of rotation until a probe brings it back. */
  failureThreshold?: number;
  /** Called for every answered turn with the replica that served it (routing audits, tests). */
  onServed?: (affinity: string | null, url: string) => void;
  /**
   * "engine" (default): prompts are counted by the engine. "usage": no count requests (a gateway
   * that forwards only /v1/*): prompts are fitted on upper bounds and the usage.prompt_tokens
   * answers report; token mode is refused.
   */
  countTokens?: "engine" | "usage";
  /** Send each request's seed (default); false sends `seed: null`, so vLLM samples the batch without per-request generators. */
  requestSeeds?: boolean;
  /**
   * "version" (default): once a trainer has named a weight version, vLLM generation requests
   * carry `cache_salt` = its label, so no prefix cached under other weights is reused. "off": never.
   */
  cacheSalt?: "version" | "off";
  /**
   * vLLM's clear_cache, sent with every POST /pause: false (default) keeps the KV cache, so a
   * keep pause's frozen requests go on from KV the old weights computed; true drops it, and they
   * are prefilled again under the new weights after /resume.
   */
  pauseClearCache?: boolean;
  /**
   * Stream token requests to replicas without /pause from the start, so even the first weight
   * update continues their turns from the ids sampled; by default streaming starts at the first
   * update (whose interrupted token turns are asked again whole), and without updates nothing changes.
   */
  streamForUpdates?: boolean;
}

/** Why token mode cannot run with count_tokens=usage. */
export const TOKENS_NEED_ENGINE_ROUTES =
  "token mode needs the engine's /tokenize and /detokenize (llama.cpp: /apply-template, /tokenize, /completion); " +
  "rollgym.llm.count_tokens=usage is for gateways without them: set rollgym.llm.count_tokens=engine, or play in chat mode";

/** vLLM ≥ 0.10.1 nests errors; older versions and llama.cpp differ, http.ts reads all of them. */
interface ChatCompletion {
  choices?: { message?: Record<string, unknown> | null; finish_reason?: string | null }[];
  usage?: { prompt_tokens?: number; completion_tokens?: number } | null;
}

/** The raw text from a message a server-side reasoning parser may have split (see docs/rollouts.md). */
export function rebuildText(message: Record<string, unknown>): { text: string; ambiguous: boolean } {
  const content = typeof message.content === "string" ? message.content : null;
  const field = message.reasoning ?? message.reasoning_content;
  const reasoning = typeof field === "string" ? field : null;
  if (reasoning === null) {
    // No parser, or qwen3 with thinking off: content is the whole text. Both null: nothing to read.
    return { text: content ?? "", ambiguous: content === null };
  }
  if (content === null) {
    // "R</think>" and "R" (cut by length) both arrive as (R, null): never invent the tag.
    return { text: reasoning, ambiguous: true };
  }
  // qwen3 splits at "<tool_call>" too when no </think> was written; that split looks the same.
  return { text: `${reasoning}</think>${content}`, ambiguous: content.startsWith("<tool_call>") };
}

export class ChatPolicy implements Policy {
  readonly name = "openai-chat";
  private readonly urls: readonly string[];
  private readonly options: Required<
    Omit<ChatPolicyOptions, "apiKey" | "extraBody" | "grammar" | "baseURL" | "maxRetries" | "onServed">
  > &
    Pick<ChatPolicyOptions, "extraBody" | "grammar" | "maxRetries" | "onServed">;
  /** The extra body plus `seed: null` when request seeds are off, merged into every request last. */
  private readonly extras: Record<string, unknown>;
  private readonly headers: Record<string, string>;
  private readonly pool: ReplicaPool;
  /** Keep-alive connections to the replicas, one per request in flight. */
  private readonly connections = new EngineConnections();
  private dialect: Dialect;
  /** The context length prompts are fitted to, kept current as replicas report theirs. */
  private readonly limit: ContextLimit;
  private counter: EngineTokenCounter | null = null;
  private tokens: TokenEngine | null = null;
  /** Set by preflight when the context length is known. */
  meter: PromptMeter | null = null;
  /** The model's name as JSON, the start of every request body, and its UTF-8 byte length. */
  private modelJson: string | null = null;
  private modelBytes = 0;
  /** Request outcomes, for reports and metrics. */
  /** Requests in backoff before their next attempt, and the fault that put the latest there. */
  private retrying = 0;
  private lastError: string | null = null;
  readonly stats = {
    requests: 0,
    retries: 0,
    failures: 0,
    aborts: 0,
    ambiguousSplits: 0,
    /** Prompts fitted on an upper bound instead of an engine count (see countRequests). */
    countsAvoided: 0,
    /** Requests ended by a weight update, to be continued or asked again after it. */
    interrupted: 0,
  };
  /** Pauses and resumes the replicas around the trainer's weight updates. */
  private readonly weights: EngineUpdates;
  /** Per replica: requests answered, for reports (never written into episode files). */
  readonly served = new Map<string, number>();

  constructor(options: ChatPolicyOptions) {
    const { baseURL, apiKey, ...rest } = options;
    this.urls = (typeof baseURL === "string" ? [baseURL] : [...baseURL]).map((u) => u.replace(/\/+$/, ""));
    if (this.urls.length === 0) throw new RangeError("ChatPolicy needs at least one base URL");
    this.options = {
      concurrency: 256,
      timeoutMs: 120_000,
      retryBudgetMs: 300_000,
      backoffMs: 250,
      maxBackoffMs: 10_000,
      prefill: "continue",
      dialect: "auto",
      maxModelLen: "auto",
      failureThreshold: 3,
      countTokens: "engine",
      requestSeeds: true,
      cacheSalt: "version",
      pauseClearCache: false,
      streamForUpdates: false,
      // An option given as undefined keeps its default.
      ...(Object.fromEntries(Object.entries(rest).filter(([, value]) => value !== undefined)) as typeof rest),
    };
    const problem = extraBodyProblem(this.options.extraBody ?? {});
    if (problem) throw new RangeError(`${problem.key}: ${problem.reason}`);
    this.extras = requestExtras(this.options.extraBody ?? {}, this.options.requestSeeds);
    this.limit = new ContextLimit(this.options.maxModelLen);
    const key = apiKey ?? process.env.OPENAI_API_KEY;
    this.headers = key ? { authorization: `Bearer ${key}` } : {};
    this.dialect = this.options.dialect === "auto" ? "vllm" : this.options.dialect;
    this.pool = new ReplicaPool(this.urls, {
      concurrency: this.options.concurrency,
      failureThreshold: this.options.failureThreshold,
      // A replica coming back may be a restart with another context length: read it again.
      probe: async (url, signal) => {
        const info = await describeEngine(url, this.dialect, this.headers, signal, this.connections);
        this.limit.note(url, info.contextLength);
        // Answering is not enough: a paused replica would hold every request sent to it.
        await this.weights.checkNotPaused(url);
      },
    });
    this.weights = new EngineUpdates(
      {
        urls: this.urls,
        control: (method, url, body) =>
          requestJson(method, url, body, {
            timeoutMs: this.options.timeoutMs,
            headers: this.headers,
            connections: this.connections,
          }),
        isHealthy: (url) => this.pool.isHealthy(url),
        takeOut: (url, reason) => this.pool.takeOutByURL(url, reason),
      },
      { clearCache: this.options.pauseClearCache },
    );
    this.weights.armed = this.options.streamForUpdates;
  }

  /** The weight-update bracket (issue #22). */
  updates(): WeightUpdates {
    return this.weights;
  }

  /** The updates as the token engine uses them (versions, streaming per replica). */
  get versions(): EngineUpdates {
    return this.weights;
  }

  /** Prompt counts sent to the engine (/tokenize, input_tokens). */
  get countRequests(): number {
    return this.counter?.requests ?? 0;
  }

  /** The replicas and their state, for metrics and reports. */
  replicas(): ReturnType<ReplicaPool["snapshot"]> {
    return this.pool.snapshot();
  }

  /**
   * Checks that the endpoints answer and serve the model, detects the dialect and context
   * length, and sets up token counting. Throws PolicyError naming the problem; replicas
   * that do not answer are left to the pool's probes when at least one does.
   */
  async preflight(signal?: AbortSignal): Promise<EngineInfo> {
    const results = await Promise.allSettled(
      this.urls.map((url) =>
        describeEngine(url, this.options.dialect, this.headers, signal, this.connections),
      ),
    );
    const answered = results.flatMap((r, i) =>
      r.status === "fulfilled" ? [{ url: this.urls[i], info: r.value }] : [],
    );
    if (answered.length === 0) {
      const reasons = results.map((r, i) =>
        r.status === "rejected"
          ? `${this.urls[i]}: ${r.reason instanceof Error ? r.reason.message : r.reason}`
          : "",
      );
      throw new PolicyError(`cannot reach ${reasons.join("; ")}`, false, "engine_unreachable");
    }
    for (const { url, info } of answered) {
      if (!info.models.includes(this.options.model)) {
        throw new PolicyError(
          `model ${JSON.stringify(this.options.model)} is not served by ${url} (it serves: ${info.models.join(", ") || "nothing"})`,
          false,
          "model_not_served",
        );
      }
    }
    const first = answered[0].info;
    this.dialect = first.dialect;
    for (const { url, info } of answered) this.limit.note(url, info.contextLength);
    const limit = this.limit.value;
    this.counter = new EngineTokenCounter({
      model: this.options.model,
      dialect: this.dialect,
      headers: this.headers,
      timeoutMs: this.options.timeoutMs,
      prefill: this.options.prefill,
      rendering: this.renderingFields,
      connections: this.connections,
    });
    if (limit !== null) {
      const counter = this.counter;
      const current = this.limit;
      const rendering = this.renderingFields;
      this.meter = {
        get limit() {
          return current.value ?? limit;
        },
        count:
          this.options.countTokens === "usage"
            ? // No count requests: a bound, tightened by the usage answers report (batch.ts).
              async (messages, prefill) => {
                this.stats.countsAvoided++;
                return promptUpperBound(messages, prefill, rendering);
              }
            : // Counted on the episode's own replica, through the pool like its turns. A cached or
              // shared count takes no lease: its "ok" would hide a dead replica's failures.
              (messages, prefill, countSignal, affinity, history) =>
                counter.count(
                  messages,
                  prefill,
                  countSignal,
                  (send) => this.routed(affinity ?? null, countSignal, (url) => send(url), "aux"),
                  history,
                ),
        fittedByBound: () => {
          this.stats.countsAvoided++;
        },
      };
    }
    const warnings = [...new Set(answered.flatMap((a) => a.info.warnings))];
    return { ...first, contextLength: limit, warnings };
  }

  /**
   * After a refusal for length: asks the replica for its context length again (a restarted vLLM
   * may run with a smaller --max-model-len). When the limit fell below the one the request was
   * fitted to, throws ContextLimitChanged so the turn is fitted again; otherwise returns.
   */
  private async recheckLength(url: string, fittedTo: number | null, signal?: AbortSignal): Promise<void> {
    try {
      const info = await describeEngine(url, this.dialect, this.headers, signal, this.connections);
      this.limit.note(url, info.contextLength);
    } catch {
      return;
    }
    const now = this.limit.value;
    if (fittedTo !== null && now !== null && now < fittedTo)
      throw new ContextLimitChanged(fittedTo, now, url);
  }

  /** The dialect requests are sent in (detected by preflight when "auto"). */
  get engineDialect(): Dialect {
    return this.dialect;
  }

  /** Token in, token out on the same replicas; null before preflight (the dialect is not known). */
  tokenEngine(): TokenEngine | null {
    if (!this.counter) return null;
    if (this.options.countTokens === "usage") throw new PolicyError(TOKENS_NEED_ENGINE_ROUTES);
    this.tokens ??= new TokenEngine(this);
    return this.tokens;
  }

  /** The replica's epoch in the pool (the token engine verifies a replica again when it changes). */
  replicaEpoch(url: string): number {
    return this.pool.epochOf(url);
  }

  forget(affinity: string): void {
    this.pool.forget(affinity);
  }

  async close(): Promise<void> {
    this.pool.close();
    await this.connections.close();
  }

  generate(request: PolicyRequest): Promise<PolicyResponse> {
    const call: Call<PolicyResponse> = {
      affinity: request.affinity ?? null,
      signal: request.signal,
      kind: "turn",
      fittedTo: request.fittedTo ?? this.limit.value,
      request,
      send: null,
    };
    return this.#run(call);
  }

  /**
   * Runs `send` on a replica leased from the pool (the affinity's while it is healthy), with
   * the pool's health accounting and this policy's retries. The token engine shares it.
   */
  routed<T>(
    affinity: string | null,
    signal: AbortSignal | undefined,
    send: (url: string, attempt: number, sent: Sent) => Promise<T>,
    kind: "turn" | "aux" = "turn",
    /** The context length the request was fitted to; default: the one in force now. */
    fittedTo: number | null = this.limit.value,
  ): Promise<T> {
    return this.#run({ affinity, signal, kind, fittedTo, request: null, send });
  }

  /** Runs a call's attempts until one succeeds, within the retry budget. */
  async #run<T>(call: Call<T>): Promise<T> {
    const budget = new RetryBudget(this.options.retryBudgetMs, call.signal, this.weights);
    try {
      return await this.retryLoop(call, budget);
    } finally {
      budget.dispose();
    }
  }

  /** One attempt of a call: a lease, the request, its outcome told to the pool. */
  async #attempt<T>(call: Call<T>, attempt: number, budget: RetryBudget): Promise<T> {
    const { affinity, signal, kind } = call;
    const lease = await this.lease(affinity, budget, kind);
    const turn = kind === "turn";
    if (turn) this.stats.requests++;
    // Generation requests are tracked, so an update can pause or interrupt them.
    const dispatch: Dispatch | null = turn ? this.weights.dispatch(lease.url, signal) : null;
    const sent: Sent =
      dispatch !== null
        ? this.dispatchFields(affinity, dispatch)
        : {
            signal,
            version: this.weights.current.ordinal,
            epoch: this.weights.epoch,
            headers: this.headers,
          };
    try {
      const result =
        call.request !== null
          ? ((await this.once(lease.url, call.request, sent, attempt)) as T)
          : await call.send!(lease.url, attempt, sent);
      lease.release("ok");
      if (turn) {
        this.served.set(lease.url, (this.served.get(lease.url) ?? 0) + 1);
        this.options.onServed?.(affinity, lease.url);
      }
      return result;
    } catch (error) {
      // An update overtook it (interrupted, or aborted by /pause?mode=abort): asked again after it.
      const overtaken =
        turn &&
        !signal?.aborted &&
        (error instanceof UpdateInterrupted ||
          (error instanceof EngineError && error.retryable && sent.epoch !== this.weights.epoch));
      if (overtaken) {
        lease.release("refused");
        this.stats.interrupted++;
        throw error instanceof UpdateInterrupted ? error : new UpdateInterrupted(lease.url);
      }
      lease.release(error instanceof EngineError && error.replicaFault ? "failed" : "refused");
      if (isLengthRefusal(error)) await this.recheckLength(lease.url, call.fittedTo, signal);
      throw error;
    } finally {
      dispatch?.done();
    }
  }

  /**
   * What a generation request carries for routers and caches: the session header (vllm-router's
   * consistent hashing and sticky_least_loaded read X-Session-ID), and cache_salt = the version
   * label once the trainer has named one, where the engine has the field (vLLM).
   */
  private dispatchFields(affinity: string | null, dispatch: Dispatch): Sent {
    const headers = affinity === null ? this.headers : { ...this.headers, "x-session-id": affinity };
    const salted = this.options.cacheSalt === "version" && this.dialect === "vllm" && this.weights.named;
    const sent: Sent = { signal: dispatch.signal, version: dispatch.version, epoch: dispatch.epoch, headers };
    if (salted) sent.body = { cache_salt: this.weights.current.label };
    return sent;
  }

  /**
   * A lease on a replica; a turn first waits while a weight update holds admission, and one
   * that got its slot after an update began gives it back and waits.
   */
  private async lease(affinity: string | null, budget: RetryBudget, kind: "turn" | "aux"): Promise<Lease> {
    // No update open, a slot free now, time left: the lease at once, with no timer or listener.
    if ((kind === "aux" || !this.weights.updating) && budget.unspent()) {
      const lease = this.pool.tryAcquire(affinity);
      if (lease !== null) return lease;
    }
    for (;;) {
      const held = kind === "turn" ? this.weights.admit(budget.signal) : null;
      if (held) await held;
      const lease = await this.pool.acquire(affinity, budget.signal);
      if (kind === "aux" || !this.weights.updating) return lease;
      lease.release("refused");
    }
  }

  engineStatus(): EngineStatus {
    const replicas = this.pool.snapshot();
    const down = replicas.filter((r) => !r.healthy).length;
    // Requests queue for a slot all the time; waiting counts only while no replica is up.
    const waiting = this.pool.anyHealthy ? 0 : this.pool.waiting;
    const busy = this.retrying > 0 || down > 0 || waiting > 0;
    return {
      retrying: this.retrying,
      waiting_for_replica: waiting,
      replicas: replicas.length,
      replicas_down: down,
      last_error: busy ? this.lastError : null,
    };
  }

  /** Settings the token engine needs to speak to the same replicas the same way. */
  get transport(): EngineTransport {
    return {
      model: this.options.model,
      headers: this.headers,
      connections: this.connections,
      timeoutMs: this.options.timeoutMs,
      grammar: this.options.grammar ?? null,
      extraBody: this.extras,
      rendering: this.renderingFields,
      clock: this.weights,
    };
  }

  /** The extra body's fields that change how the chat template renders, for count and render requests. */
  private get renderingFields(): Record<string, unknown> {
    return renderingFields(this.options.extraBody ?? {}, this.dialect);
  }

  /**
   * Runs a call's attempts until one succeeds, a non-retryable error, the time budget or the
   * attempt cap. Aborts by the caller end it with "cancelled".
   */
  private async retryLoop<T>(call: Call<T>, budget: RetryBudget): Promise<T> {
    const { signal } = call;
    const { retryBudgetMs, backoffMs, maxBackoffMs, maxRetries } = this.options;
    let last: unknown = null;
    // Attempts an update interrupted are asked again at once and count against nothing.
    let interrupted = 0;
    for (let tries = 0; ; tries++) {
      const index = tries - interrupted;
      try {
        return await this.#attempt(call, tries, budget);
      } catch (error) {
        if (signal?.aborted) throw new PolicyError("cancelled");
        if (error instanceof UpdateInterrupted) {
          interrupted++;
          continue;
        }
        if (budget.expired && !(error instanceof EngineError)) {
          // Waited for a healthy replica until the budget ran out.
          this.stats.failures++;
          throw new PolicyError(
            `no replica answered within the retry budget of ${retryBudgetMs / 1000} s` +
              (last ? ` (last error: ${describe(last)})` : ""),
            true,
          );
        }
        if (!(error instanceof EngineError)) throw error;
        last = error;
        if (!error.retryable) {
          this.stats.failures++;
          throw new PolicyError(error.message);
        }
        if (error instanceof UnusableAnswer && index >= 1) {
          this.stats.failures++;
          throw new PolicyError(`${error.message} (twice; an answer like this is not retried further)`);
        }
        const elapsed = budget.spentMs();
        const capped = maxRetries !== null && maxRetries !== undefined && index >= maxRetries;
        if (capped || elapsed >= retryBudgetMs) {
          this.stats.failures++;
          throw new PolicyError(
            `${error.message} (gave up after ${index + 1} attempts in ${(elapsed / 1000).toFixed(1)} s)`,
            true,
          );
        }
        this.stats.retries++;
        this.lastError = error.message;
        const backoff =
          Math.min(maxBackoffMs, backoffMs * 2 ** Math.min(index, 20)) * (0.5 + Math.random() / 2);
        // Retry-After is a floor, never a reason to retry hot ("Retry-After: 0").
        const wait = Math.min(
          error.retryAfterS !== null ? Math.max(error.retryAfterS * 1000, backoffMs) : backoff,
          retryBudgetMs - elapsed,
        );
        this.retrying++;
        try {
          await sleep(wait, undefined, { signal });
        } catch {
          throw new PolicyError("cancelled");
        } finally {
          this.retrying--;
        }
      }
    }
  }

  /**
   * The request body as JSON text, the same text as JSON.stringify of {model, messages, the
   * sampling fields, the prefill's flags, the grammar, the extra body, `extra`} would give: the
   * messages come from the episode's HistoryJson when it sends one (serialised once, extended
   * turn by turn), and the fields after them are serialised on their own. Its byte length is
   * the sum of the parts' (HistoryJson counts its own), for the Content-Length.
   */
  private body(request: PolicyRequest, extra: Record<string, unknown> | undefined): JsonText {
    const prefill = this.options.prefill === "continue";
    const history = request.history ?? new HistoryJson();
    let messages = history.elements(request.messages);
    let messagesBytes = history.bytes;
    if (prefill) {
      const last = JSON.stringify({ role: "assistant", content: request.prefill });
      messagesBytes += (messages === "" ? 0 : 1) + utf8Length(last);
      messages = messages === "" ? last : `${messages},${last}`;
    }
    const grammar = this.options.grammar
      ? this.dialect === "llamacpp"
        ? { grammar: this.options.grammar }
        : { structured_outputs: { grammar: this.options.grammar } }
      : {};
    // extra_body can hold neither model nor messages (extraBodyProblem), so no field comes twice.
    const rest = JSON.stringify({
      ...samplingFields(request.sampling, this.dialect),
      ...(prefill ? { continue_final_message: true, add_generation_prompt: false } : {}),
      ...grammar,
      ...this.extras,
      ...extra,
    });
    if (this.modelJson === null) {
      this.modelJson = JSON.stringify(this.options.model);
      this.modelBytes = utf8Length(this.modelJson);
    }
    // The fields replace rest's one-byte "{" with "," (or are its "}" alone).
    const fields = rest === "{}" ? "}" : `,${rest.slice(1)}`;
    const fieldsBytes = rest === "{}" ? 1 : utf8Length(rest);
    const text = `{"model":${this.modelJson},"messages":[${messages}]${fields}`;
    // {"model": … ,"messages":[ … ] …
    const bytes = 9 + this.modelBytes + 13 + messagesBytes + 1 + fieldsBytes;
    return new JsonText(text, bytes);
  }

  /** A generation turn on `url`, with its attempts and the versions it was played under. */
  private async once(
    url: string,
    request: PolicyRequest,
    sent: Sent,
    attempt: number,
  ): Promise<PolicyResponse> {
    const body = this.body(request, sent.body);
    const completion = (await requestJson("POST", `${url}/chat/completions`, body, {
      signal: sent.signal,
      timeoutMs: this.options.timeoutMs,
      headers: sent.headers,
      connections: this.connections,
      clock: this.weights,
    })) as ChatCompletion;
    const choice = completion?.choices?.[0];
    if (!choice?.message) throw new UnusableAnswer("the response has no choices");
    const finishReason = choice.finish_reason ?? null;
    if (finishReason === "abort") this.stats.aborts++;
    checkFinishReason(finishReason);
    const rebuilt = rebuildText(choice.message);
    if (rebuilt.ambiguous) this.stats.ambiguousSplits++;
    let text = rebuilt.text;
    // Without a prefill the model writes the opening tag itself; the episode adds it back.
    if (this.options.prefill === "none" && text.startsWith(request.prefill))
      text = text.slice(request.prefill.length);
    const response: PolicyResponse = {
      text,
      finishReason,
      promptTokens: completion.usage?.prompt_tokens,
      completionTokens: completion.usage?.completion_tokens,
    };
    if (rebuilt.ambiguous) response.ambiguousSplit = true;
    response.attempts = attempt + 1;
    response.versions = this.weights.stamp(sent.version, { epoch: sent.epoch, url });
    return response;
  }
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** One routed request: what its attempts need, made once instead of a closure per attempt. */
interface Call<T> {
  readonly affinity: string | null;
  readonly signal: AbortSignal | undefined;
  readonly kind: "turn" | "aux";
  /** The context length the request was fitted to. */
  readonly fittedTo: number | null;
  /** A generation turn (generate()), or null for the caller's own `send`. */
  readonly request: PolicyRequest | null;
  readonly send: ((url: string, attempt: number, sent: Sent) => Promise<T>) | null;
}

/**
 * A request's retry budget (wall time less time paused by updates), made into a timer only
 * when the request has to wait (for a slot, an update, a backoff): most never do, and a
 * timer, a controller and a listener on the caller's signal per request add up.
 */
class RetryBudget {
  readonly #ms: number;
  readonly #parent: AbortSignal | undefined;
  readonly #clock: PauseClock;
  readonly #started = Date.now();
  readonly #pausedAtStart: number;
  /** The timer, once something waited; it counts the time left when it was made. */
  #deadline: Deadline | null = null;
  #spentBefore = 0;

  constructor(ms: number, parent: AbortSignal | undefined, clock: PauseClock) {
    this.#ms = ms;
    this.#parent = parent;
    this.#clock = clock;
    this.#pausedAtStart = clock.pausedMs();
  }

  /** Aborts when the budget runs out or the caller's signal aborts. */
  get signal(): AbortSignal {
    if (this.#deadline === null) {
      this.#spentBefore = this.spentMs();
      this.#deadline = deadline(Math.max(0, this.#ms - this.#spentBefore), this.#parent, this.#clock);
    }
    return this.#deadline.signal;
  }

  /** True when the time limit (not the caller) ended it: once spent, whether or not a timer was made. */
  get expired(): boolean {
    return this.#deadline !== null ? this.#deadline.expired : this.spentMs() >= this.#ms;
  }

  /** Nothing has waited yet, the caller has not aborted, and time is left. */
  unspent(): boolean {
    return this.#deadline === null && !this.#parent?.aborted && this.spentMs() < this.#ms;
  }

  /** Milliseconds counted against the budget so far. */
  spentMs(): number {
    return Date.now() - this.#started - (this.#clock.pausedMs() - this.#pausedAtStart);
  }

  dispose(): void {
    this.#deadline?.dispose();
  }
}
