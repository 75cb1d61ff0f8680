// vLLM's scheduler pause (facts §4.3: POST /pause?mode=abort|wait|keep&clear_cache=…, POST
// /resume): new requests queue until resume, whatever the mode; "abort" ends every held request
// at once, "wait" answers once the running ones are done, "keep" freezes running ones between
// tokens. clear_cache (vLLM's default true) drops the KV and prefix caches: a frozen request is
// preempted and prefilled again after /resume (trainers-and-scale.md), which only the counts show
// here. Tests may make /pause refuse and /resume fail.
import { setTimeout as delay } from "node:timers/promises";
import type { PauseMode } from "../../protocol/settings.ts";
import type { PrefixCache } from "./prefix-cache.ts";
import type { DecodeScheduler } from "./scheduler.ts";
import type { MockEngineStats } from "./stats.ts";

export type { PauseMode };

/** A generation request from acceptance to its last byte, as /pause sees it. */
export interface Inflight {
  /** Set once it holds an engine slot and has passed the pause gate. */
  running: boolean;
  /** /pause?mode=abort ends it with what it generated so far. */
  engineAbort: AbortController;
  done: Promise<void>;
  /** Tokens its KV cache holds now: the prompt and what it has generated. */
  cachedTokens(): number;
}

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

export class EnginePause {
  /** Every generation request the engine holds, queued or running. */
  readonly inflight = new Set<Inflight>();
  #mode: PauseMode | null = null;
  // Settles at every pause or resume, so waiters re-check the mode (keep → wait unfreezes).
  #changed = deferred();
  readonly #scheduler: DecodeScheduler;
  readonly #stats: MockEngineStats;
  readonly #prefixCache: PrefixCache;
  /** Frozen by a keep pause that dropped their KV: prefilled again at resume. */
  readonly #evicted = new Set<Inflight>();
  /** While set, /pause answers 500 with this reason and pauses nothing (tests). */
  refusal: string | null = null;
  /** The next this many /resume answer 500 and leave the engine paused (tests). */
  resumeFailures = 0;

  constructor(scheduler: DecodeScheduler, stats: MockEngineStats, prefixCache: PrefixCache) {
    this.#scheduler = scheduler;
    this.#stats = stats;
    this.#prefixCache = prefixCache;
  }

  get mode(): PauseMode | null {
    return this.#mode;
  }

  /** Blocks while the engine is paused (a "keep" pause freezes running requests here too). */
  gate(signal: AbortSignal): Promise<void> {
    return this.#waitWhile(() => this.#mode !== null, signal);
  }

  /** Running requests wait here (between tokens) while a "keep" pause lasts. */
  keepGate(signal: AbortSignal): Promise<void> {
    return this.#waitWhile(() => this.#mode === "keep", signal);
  }

  /** Resolves when vLLM's /pause would answer. */
  async pause(mode: PauseMode, clearCache = true): Promise<void> {
    this.#setMode(mode);
    this.#stats.pauses++;
    if (clearCache) {
      this.#stats.pauseCacheClears++;
      this.#prefixCache.clear();
      if (mode === "keep") for (const r of this.inflight) if (r.running) this.#evicted.add(r);
    }
    if (mode === "abort") {
      // Every request the engine holds, running or queued, ends now with what it has.
      const ending = [...this.inflight];
      for (const r of ending) r.engineAbort.abort();
      await Promise.race([Promise.all(ending.map((r) => r.done)), delay(1000, undefined, { ref: false })]);
    } else if (mode === "wait") {
      // Running requests finish; queued ones stay queued until /resume.
      await Promise.all([...this.inflight].filter((r) => r.running).map((r) => r.done));
    }
  }

  resume(): void {
    for (const r of this.#evicted) {
      this.#stats.reprefills++;
      this.#stats.reprefillTokens += r.cachedTokens();
    }
    this.#evicted.clear();
    this.#stats.resumes++;
    this.#setMode(null);
  }

  async #waitWhile(paused: () => boolean, signal: AbortSignal): Promise<void> {
    while (paused()) {
      signal.throwIfAborted();
      await Promise.race([this.#changed.promise, untilAborted(signal)]);
    }
  }

  #setMode(mode: PauseMode | null): void {
    this.#mode = mode;
    // A "keep" pause stops the engine's clock: running requests make no progress until resume.
    if (mode === "keep") this.#scheduler.freeze();
    else this.#scheduler.thaw();
    const changed = this.#changed;
    this.#changed = deferred();
    changed.resolve();
  }
}
