// max_staleness over ShardedClient.stream (python/rollgym_client/sharded.py, issue 34 item 2) with
// plain `rollgym serve` processes on one mock engine, no Ray: test/python/stale_shards_check.py
// updates the weights across two shards each time the staleness rule's bound is reached, and
// checks that the shards together admit exactly what one server admits by each version.
import { describe, expect, it } from "vitest";
import { shardCheck } from "../helpers/shard-checks.ts";

describe("max_staleness over a sharded stream (plain rollgym serve processes)", () => {
  it("two shards admit (S + v + 1) × B groups by version v between them, as one server does, and none arrives older than S", () => {
    const summary = shardCheck("stale_shards_check.py", 240_000);
    // S = 1, B = 3, 3 updates: (S + v + 1) × B for v = 0 … 3.
    expect(summary).toMatchObject({
      ok: true,
      bound: [6, 9, 12, 15],
      shards: { admitted_by_version: [6, 9, 12, 15] },
      alone: { admitted_by_version: [6, 9, 12, 15] },
    });
  }, 300_000);
});
