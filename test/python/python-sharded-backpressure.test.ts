// Backpressure from a sharded stream's consumer (python/rollgym_client/sharded.py, issue 34) with
// plain `rollgym serve` processes, no Ray: test/python/sharded_backpressure_check.py stops taking
// groups and checks that the shards pause at their buffer bound instead of playing on into the
// client's memory, then takes groups again until windows are judged.
import { describe, expect, it } from "vitest";
import { shardCheck } from "../helpers/shard-checks.ts";

describe("a sharded stream whose consumer stops taking groups (plain rollgym serve processes)", () => {
  it("the shards pause within their buffer, the credit and the stream's hold per shard, then go on", () => {
    const summary = shardCheck("sharded_backpressure_check.py", 120_000);
    // 6 taken + 2 shards × (4 buffered + 2 fetched + 2 held).
    expect(summary).toMatchObject({ ok: true, most: 22, hold: 2, windows: [0, 1, 2, 3] });
    expect(summary.paused_at).toBeLessThanOrEqual(summary.most);
  }, 180_000);
});
