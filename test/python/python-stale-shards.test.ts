// max_staleness over ShardedClient.stream (python/rollgym_client/sharded.py, issue 34 item 2) with
// plain `rollgym serve` processes on one mock engine, no Ray: test/python/stale_shards_check.py
// updates the weights across two shards each time the staleness rule's bound is reached, and
// checks that the shards together admit exactly what one server admits by each version.
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ROOT } from "../helpers/cli.ts";

const PYTHON = "/usr/bin/python3";

describe("max_staleness over a sharded stream (plain rollgym serve processes)", () => {
  it("two shards admit (S + v + 1) × B groups by version v between them, as one server does, and none arrives older than S", () => {
    const result = spawnSync(PYTHON, ["-W", "ignore", join("test", "python", "stale_shards_check.py")], {
      cwd: ROOT,
      encoding: "utf8",
      timeout: 240_000,
      env: {
        ...process.env,
        PYTHONPATH: "python",
        PYTHONDONTWRITEBYTECODE: "1",
        ROLLGYM_COMMAND: JSON.stringify([process.execPath, join(ROOT, "bin", "rollgym.js")]),
      },
    });
    expect(result.status, `${result.stdout}\n${result.stderr}`).toBe(0);
    const summary = JSON.parse(result.stdout.trim().split("\n").at(-1) ?? "{}");
    // S = 1, B = 3, 3 updates: (S + v + 1) × B for v = 0 … 3.
    expect(summary).toMatchObject({
      ok: true,
      bound: [6, 9, 12, 15],
      shards: { admitted_by_version: [6, 9, 12, 15] },
      alone: { admitted_by_version: [6, 9, 12, 15] },
    });
  }, 300_000);
});
