// The state every route of one mock engine shares: its config, tokenizer, counts, slots,
// decode scheduler and pause.
import { modelNotFound } from "./errors.ts";
import type { EngineConfig } from "./options.ts";
import { EnginePause } from "./pause.ts";
import { PrefixCache } from "./prefix-cache.ts";
import { loadQwen3Tokenizer } from "./qwen3-tokenizer.ts";
import { DecodeScheduler } from "./scheduler.ts";
import { Slots } from "./slots.ts";
import { emptyStats, type MockEngineStats } from "./stats.ts";
import { type MockTokenizer, TOY_TOKENIZER } from "./tokenizer.ts";
import { EngineWeights } from "./weights.ts";

export interface EngineCore {
  readonly config: EngineConfig;
  readonly tokenizer: MockTokenizer;
  /** The counts as they stand; stats() adds what is read at the call (statsNow). */
  readonly stats: MockEngineStats;
  readonly slots: Slots;
  readonly scheduler: DecodeScheduler;
  readonly pause: EnginePause;
  /** Version label, loaded weights and the per-token record of which weights made what. */
  readonly weights: EngineWeights;
  /** Prefix-cache hit counts per cache_salt. */
  readonly prefixCache: PrefixCache;
  /** Unix seconds, for the model cards. */
  readonly startedAt: number;
  /** stats() as of now: the decode progress, per-token time and CPU are read at the call. */
  statsNow(): MockEngineStats;
  /** The served model a request names (null: the first), or 404 as vLLM answers. */
  resolveModel(requested: string | null): string;
}

/** Loads the tokenizer the config names (the Qwen3 one only when asked for). */
export async function createCore(config: EngineConfig): Promise<EngineCore> {
  const tokenizer = config.tokenizer === "qwen3" ? await loadQwen3Tokenizer() : TOY_TOKENIZER;
  const stats = emptyStats();
  const scheduler = new DecodeScheduler(config.latency);
  const prefixCache = new PrefixCache();
  return {
    config,
    tokenizer,
    stats,
    slots: new Slots(config.maxConcurrency),
    scheduler,
    pause: new EnginePause(scheduler, stats, prefixCache),
    weights: new EngineWeights(),
    prefixCache,
    startedAt: Math.floor(Date.now() / 1000),
    statsNow(): MockEngineStats {
      const cpu = process.cpuUsage();
      return {
        ...structuredClone(stats),
        decodedTokens: scheduler.decodedTokens(),
        perTokenMs: scheduler.perTokenMs,
        cpuSeconds: (cpu.user + cpu.system) / 1e6,
        prefixCacheQueries: prefixCache.total.queries,
        prefixCacheHits: prefixCache.total.hits,
        prefixCacheBySalt: Object.fromEntries(
          [...prefixCache.bySalt].map(([salt, counts]) => [salt, { ...counts }]),
        ),
      };
    },
    resolveModel(requested: string | null): string {
      if (requested === null) return config.models[0];
      if (!config.models.includes(requested)) throw modelNotFound(requested);
      return requested;
    },
  };
}
