// The prefix cache's bookkeeping, as vLLM counts it for prefix_cache_queries/hits: prompts are
// cut into full blocks of 16 tokens, each block keyed by a hash chained over the blocks before
// it and the request's cache_salt (vLLM salts the first block's hash), so requests share
// cached blocks only with requests carrying the same salt. Only the counts are modelled: the
// mock's latency does not depend on hits.

export const BLOCK_TOKENS = 16;
/** Blocks remembered at most, least recently used evicted first. */
const BLOCKS_KEPT = 1 << 18;

export interface PrefixCounts {
  /** Prompt tokens looked up. */
  queries: number;
  /** Of those, tokens found in cached blocks. */
  hits: number;
}

/** 53-bit FNV-1a-style mix of a chain value and a block's ids. */
function chain(previous: number, ids: readonly number[], from: number): number {
  let lo = previous >>> 0;
  let hi = Math.floor(previous / 2 ** 32) >>> 0;
  for (let i = from; i < from + BLOCK_TOKENS; i++) {
    lo = Math.imul(lo ^ ids[i], 0x01000193) >>> 0;
    hi = Math.imul(hi ^ (lo >>> 7) ^ ids[i], 0x9e3779b1) >>> 0;
  }
  return (hi & 0x1fffff) * 2 ** 32 + lo;
}

function saltSeed(salt: string | null): number {
  if (salt === null) return 0;
  let h = 0x811c9dc5;
  for (let i = 0; i < salt.length; i++) h = Math.imul(h ^ salt.charCodeAt(i), 0x01000193) >>> 0;
  return h + 1;
}

export class PrefixCache {
  readonly #blocks = new Map<number, true>();
  readonly total: PrefixCounts = { queries: 0, hits: 0 };
  /** Per salt ("" for requests without one). */
  readonly bySalt = new Map<string, PrefixCounts>();

  /** Forgets every block (a /pause with clear_cache). */
  clear(): void {
    this.#blocks.clear();
  }

  /** Looks `ids` up under `salt`, counts the hits, and caches its blocks. */
  lookup(salt: string | null, ids: readonly number[]): number {
    let key = saltSeed(salt);
    let hits = 0;
    let missed = false;
    for (let from = 0; from + BLOCK_TOKENS <= ids.length; from += BLOCK_TOKENS) {
      key = chain(key, ids, from);
      if (!missed && this.#blocks.has(key)) {
        hits += BLOCK_TOKENS;
        this.#blocks.delete(key);
      } else missed = true;
      this.#blocks.set(key, true);
      if (this.#blocks.size > BLOCKS_KEPT) this.#blocks.delete(this.#blocks.keys().next().value as number);
    }
    const name = salt ?? "";
    let counts = this.bySalt.get(name);
    if (counts === undefined) {
      counts = { queries: 0, hits: 0 };
      this.bySalt.set(name, counts);
    }
    for (const c of [counts, this.total]) {
      c.queries += ids.length;
      c.hits += hits;
    }
    return hits;
  }
}
