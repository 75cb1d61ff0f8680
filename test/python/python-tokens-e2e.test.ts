// Token mode end to end: `rollgym serve --llm <mock vLLM>` streams token logs to the Python
// client (Debian's python3), whose pack_batch output is checked against the CLI's episode file.
import type { ChildProcess } from "node:child_process";
import { execFile } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type MockEngine, startMockEngine } from "../../src/mock-engine/server.ts";
import { ROOT, rollgym, spawnServe } from "../helpers/cli.ts";

const run = promisify(execFile);
let engine: MockEngine;
let serve: { url: string; child: ChildProcess };

beforeAll(async () => {
  engine = await startMockEngine({ model: "mock", seed: 3 });
  serve = await spawnServe(["--llm", engine.url, "--model", "mock"]);
});
afterAll(async () => {
  serve?.child.kill("SIGTERM");
  await engine?.close();
});

describe("token mode through the Python client", () => {
  it("tokens=True gives the CLI's token logs as numpy views; pack_batch masks exactly the sampled ids", async () => {
    const file = join(mkdtempSync(join(tmpdir(), "rollgym-tokens-")), "episodes.jsonl");
    const cli = await rollgym([
      "rollout",
      "--llm",
      engine.url,
      "--model",
      "mock",
      "--tag",
      "SimpleSokoban",
      "--groups",
      "2",
      "--group-size",
      "4",
      "--seed",
      "10000",
      "--tokens",
      "--json",
      "--out",
      file,
    ]);
    expect(cli.code, cli.stderr).toBe(0);
    const { stdout } = await run("/usr/bin/python3", ["test/python/tokens_e2e_check.py"], {
      cwd: ROOT,
      env: { ...process.env, ROLLGYM_URL: serve.url, ROLLGYM_EPISODES: file },
    });
    const summary = JSON.parse(stdout.trim().split("\n").at(-1)!) as { episodes: number; sampled: number };
    expect(summary.episodes).toBe(8);
    expect(summary.sampled).toBeGreaterThan(0);
  });
});
