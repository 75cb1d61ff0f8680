// What a token-mode episode's token log costs to hold, per token id: N logs built the way token
// mode builds them (the first prompt's ids, then per turn the sampled ids with their logprobs and
// the ids inserted before the next turn), held with their records, after a full GC. The figure
// behind docs/server.md "Memory bounds, from the limits", line "token logs" (src/bench/memory-bound.ts).
//
//   node --expose-gc bench/token-log-memory.ts [episodes 4096] [prompt ids 600] [turns 2] [sampled 16] [inserted 60]
import { TokenLog } from "../src/rollout/token-log.ts";

const [episodes = 4096, promptIds = 600, turns = 2, sampled = 16, inserted = 60] = process.argv
  .slice(2)
  .map(Number);
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error("run with node --expose-gc");

/** Ids as a Qwen3 vocabulary spreads them (most above the small-integer cache of any runtime). */
const id = (i: number) => (i * 7919) % 151_643;

function build(n: number): { log: TokenLog; record: unknown }[] {
  const logs: { log: TokenLog; record: unknown }[] = [];
  for (let e = 0; e < n; e++) {
    const log = new TokenLog(Array.from({ length: promptIds }, (_, i) => id(e + i)));
    for (let t = 0; t < turns; t++) {
      const ids = Array.from({ length: sampled }, (_, i) => id(e * 31 + t * 17 + i));
      // Logprobs are doubles: the array holding them stores 8 bytes each, unboxed.
      log.sampled(
        ids,
        ids.map((_, i) => -Math.random() * (i + 1)),
      );
      log.reward(t === turns - 1 ? 1 : 0);
      if (t < turns - 1) log.inserted(Array.from({ length: inserted }, (_, i) => id(e + t + i)));
    }
    logs.push({ log, record: log.record(true) });
  }
  return logs;
}

const usage = () => {
  gc();
  gc();
  const m = process.memoryUsage();
  return { heap: m.heapUsed, rss: m.rss, external: m.external + m.arrayBuffers };
};

const before = usage();
const held = build(episodes);
const after = usage();
const ids = held.reduce((sum, { log }) => sum + log.length, 0);
const per = (bytes: number) => (bytes / ids).toFixed(1);
console.log(
  `${episodes} token logs of ${ids / episodes} ids (${promptIds} prompt, ${turns} turns of ${sampled} sampled, ${inserted} inserted between): ` +
    `heap +${((after.heap - before.heap) / 2 ** 20).toFixed(1)} MiB (${per(after.heap - before.heap)} B per id), ` +
    `RSS +${((after.rss - before.rss) / 2 ** 20).toFixed(1)} MiB (${per(after.rss - before.rss)} B per id), ` +
    `external +${per(after.external - before.external)} B per id`,
);
// The logs stay reachable until here, so the GC above could not take them.
if (held.length !== episodes) throw new Error("lost logs");
