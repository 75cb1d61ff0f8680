// What the mock engine counts: stats(), GET /mock/stats, and the source of GET /metrics.
import { DEFAULTED_FIELDS, type DefaultedField } from "./generation-config.ts";

export interface MockEngineStats {
  /** Every HTTP request, on any route. */
  requests: number;
  /** The same by path (a path no route serves counts as "other"): engine requests per turn by kind. */
  requestsByRoute: Record<string, number>;
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
  /** Malformed answers among the completed (per choice). */
  formatErrors: number;
  /** Answered 200 with finish_reason "abort" by the abortRate draw. */
  injectedAborts: number;
  /** Pauses and resumes applied (/pause answered, /resume that resumed): how often a replica was paused. */
  pauses: number;
  resumes: number;
  /** Requests ended with finish_reason "abort" by /pause?mode=abort. */
  pauseAborts: number;
  /** Pauses with clear_cache true (vLLM's default): the KV and prefix caches were dropped. */
  pauseCacheClears: number;
  /**
   * Requests frozen by a keep pause that dropped the cache, prefilled again after /resume, and
   * the tokens recomputed (prompt + generated so far). A keep pause with clear_cache false adds none.
   */
  reprefills: number;
  reprefillTokens: number;
  /** Generation requests that arrived while the engine was paused (vLLM queues them until /resume). */
  arrivedWhilePaused: number;
  /** Generation requests in which at least one field took a generation-config default. */
  defaultsApplied: number;
  /** Per request field: how many generation requests took its generation-config default. */
  defaultsAppliedByField: Record<DefaultedField, number>;
  /** Connections reset by setOutage("reset"). */
  outageResets: number;
  /** Requests answered 503 by setOutage("503"). */
  outageUnavailable: number;
  promptTokens: number;
  generationTokens: number;
  /** Per choice. */
  finishReasons: { stop: number; length: number; abort: number };
  running: number;
  waiting: number;
  peakRunning: number;
  /**
   * Tokens the engine has decoded, including the fractional progress of running requests and
   * what aborted ones made (a float). Its growth over a window ÷ the window's length is the
   * engine's delivered tokens/s. At the end of a request it has added exactly the tokens that
   * request generated.
   */
  decodedTokens: number;
  /** The per-token time now, ms: the latency model at the current number of running requests. */
  perTokenMs: number;
  /** CPU seconds (user + system) of the process the engine runs in (process.cpuUsage()). */
  cpuSeconds: number;
  /** Prompt tokens looked up in the prefix cache, and of those found cached (vLLM's prefix_cache_queries/hits). */
  prefixCacheQueries: number;
  prefixCacheHits: number;
  /** The same per cache_salt ("" for requests without one): salts never share blocks. */
  prefixCacheBySalt: Record<string, { queries: number; hits: number }>;
}

export function emptyStats(): MockEngineStats {
  return {
    requests: 0,
    requestsByRoute: {},
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
    injectedAborts: 0,
    pauses: 0,
    resumes: 0,
    pauseAborts: 0,
    pauseCacheClears: 0,
    reprefills: 0,
    reprefillTokens: 0,
    arrivedWhilePaused: 0,
    defaultsApplied: 0,
    defaultsAppliedByField: Object.fromEntries(DEFAULTED_FIELDS.map((f) => [f, 0])) as Record<
      DefaultedField,
      number
    >,
    outageResets: 0,
    outageUnavailable: 0,
    promptTokens: 0,
    generationTokens: 0,
    finishReasons: { stop: 0, length: 0, abort: 0 },
    running: 0,
    waiting: 0,
    peakRunning: 0,
    decodedTokens: 0,
    perTokenMs: 0,
    cpuSeconds: 0,
    prefixCacheQueries: 0,
    prefixCacheHits: 0,
    prefixCacheBySalt: {},
  };
}
