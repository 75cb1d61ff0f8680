// Engine-side fairness across shards (issue 34 item 5) with plain `rollgym serve` processes, no
// Ray: test/python/fair_shards_check.py has two shards share one mock engine with fewer slots
// than they keep in flight, and counts from the engine's own records whom it served.
import { describe, expect, it } from "vitest";
import { shardCheck } from "../helpers/shard-checks.ts";

describe("two shards sharing one engine (plain rollgym serve processes)", () => {
  it("with the same rollgym.llm.concurrency, each is served at least 2/3 as many requests as the other while both send", () => {
    const summary = shardCheck("fair_shards_check.py", 120_000, { FAIR_CONCURRENCY: "4,4" });
    expect(summary).toMatchObject({ ok: true, concurrency: [4, 4] });
    // Both shards' requests were counted, and the check compared a real overlap.
    expect(Math.min(...summary.while_both_sent)).toBeGreaterThan(20);
    expect(summary.share).toBeGreaterThanOrEqual(2 / 3);
  }, 180_000);
});
