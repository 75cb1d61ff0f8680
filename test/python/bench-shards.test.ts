// bench/shards.py (issue 34's shard figures) kept runnable: one tiny case, 1 shard against 1 mock
// engine for about a second, checked for the figures bench/RESULTS.md quotes; and its usage error.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ROOT } from "../helpers/cli.ts";

function shardsBench(args: readonly string[]) {
  return spawnSync("/usr/bin/python3", ["bench/shards.py", ...args], {
    cwd: ROOT,
    encoding: "utf8",
    timeout: 90_000,
    env: { ...process.env, PYTHONDONTWRITEBYTECODE: "1" },
  });
}

describe("bench/shards.py", () => {
  it("measures one shard: episodes, engine requests, server CPU per request, client CPU per group", () => {
    const out = join(mkdtempSync(join(tmpdir(), "rollgym-shards-")), "run.json");
    const args = ["--shards", "1", "--replicas", "1", "--in-flight", "32", "--max-turn", "2"];
    const run = shardsBench([...args, "--warmup", "0.5", "--duration", "1", "--json", out]);
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/^1 shard\(s\), 1 replica\(s\), 32 in flight: .* episodes\/s/m);
    const { rows } = JSON.parse(readFileSync(out, "utf8"));
    expect(rows).toHaveLength(1);
    const [row] = rows;
    expect(row).toMatchObject({ shards: 1, replicas: 1, episodes_in_flight: 32, run: 1 });
    expect(row.groups).toBeGreaterThan(0);
    expect(row.episodes).toBe(row.groups * 16);
    for (const key of ["engine_requests_per_s", "server_cpu_ms_per_request", "client_cpu_ms_per_group"]) {
      expect(row[key], key).toBeGreaterThan(0);
    }
    expect(row.server_cpu_ms_per_request_each).toHaveLength(1);
    expect(row.engine_cores_each).toHaveLength(1);
  });

  it("refuses a bad --shards with the flag and what is allowed", () => {
    const run = shardsBench(["--shards", "one"]);
    expect(run.status).toBe(2);
    expect(run.stderr).toContain("--shards must be comma-separated integers, got 'one'");
  });
});
