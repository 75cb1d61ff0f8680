// A shard lost under ShardedClient (python/rollgym_client/sharded.py, issue 34) with plain
// `rollgym serve` processes, no Ray: test/python/shard_failure_check.py kills one of two shards
// (SIGKILL) mid-way through an endless stream, stops another (SIGSTOP) under a batch rollout,
// and kills every shard under one.
// The Ray version (3 shards) is in python-ray.test.ts.
import { describe, expect, it } from "vitest";
import { shardCheck } from "../helpers/shard-checks.ts";

describe("ShardedClient when a shard is lost (plain rollgym serve processes)", () => {
  it("a killed shard's groups of every later window play on the other, each handed out once, windows equal to a lone server's; a stopped shard's batch share plays on the other; none left: an error naming each", () => {
    const summary = shardCheck("shard_failure_check.py", 240_000);
    expect(summary).toMatchObject({
      ok: true,
      // Shard 1 of 2 killed: its groups 2..4 of each window moved to shard 0.
      killed_stream: { victim: 1 },
      // Shard 0 of 2 (the one that judges) stopped: its groups 0..2 played on shard 1.
      stopped_batch: { victim: 0, groups: [0, 3] },
      // Both of two shards killed: ConnectionLost no_shards naming each (checked in Python).
      none_left: { code: "no_shards", shards: 2 },
    });
    // The lone server's windows were compared from window 0 to WINDOWS_AFTER (3) past the move.
    expect(summary.killed_stream.windows).toBe(summary.killed_stream.from_window + 3);
  }, 300_000);
});
