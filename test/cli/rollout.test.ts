// `rollgym rollout` through npx: built-in policies, the mock engine, episode files, RAGEN
// command lines, and one-line errors for bad input.

import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startMockEngine } from "../../src/mock-engine/server.ts";
import { expectUsageError, rollgym } from "../helpers/cli.ts";
import { FIXTURES } from "../helpers/fixtures.ts";
import { runInProcess } from "./in-process.ts";

const dir = mkdtempSync(join(tmpdir(), "rollgym-rollout-"));

async function summary(args: string[]) {
  const r = await rollgym(["rollout", ...args, "--json"]);
  if (r.code !== 0) throw new Error(`exit ${r.code}: ${r.stderr}`);
  return {
    ...(JSON.parse(r.stdout) as { metrics: Record<string, number>; episodes: number; failed: number }),
    stderr: r.stderr,
  };
}

describe.concurrent("rollgym rollout", () => {
  let engine: Awaited<ReturnType<typeof startMockEngine>>;
  beforeAll(async () => {
    engine = await startMockEngine({ model: "mock-qwen", seed: 11 });
  });
  afterAll(async () => {
    await engine?.close();
  });

  it("the oracle solves every CoordSokoban validation puzzle (all fit the 10-action budget)", async () => {
    const s = await summary([
      "--mode",
      "val",
      "--tag",
      "CoordSokoban",
      "--groups",
      "512",
      "--policy",
      "oracle",
    ]);
    expect(s.episodes).toBe(512);
    expect(s.failed).toBe(0);
    expect(s.metrics["val-env/CoordSokoban/success"]).toBe(1);
    expect(s.metrics["val-env/CoordSokoban/pass@1"]).toBe(1);
  });

  it("prints a table with the random policy's success rate on SimpleSokoban", async () => {
    const r = await rollgym([
      "rollout",
      "--mode",
      "val",
      "--tag",
      "SimpleSokoban",
      "--groups",
      "128",
      "--policy",
      "random",
    ]);
    expect(r.code).toBe(0);
    const line = r.stdout.split("\n").find((l) => l.startsWith("val-env/SimpleSokoban/success "));
    expect(line).toBeDefined();
    const rate = Number(line!.trim().split(/\s+/).at(-1));
    expect(rate).toBeGreaterThan(0);
    expect(rate).toBeLessThan(0.6);
    expect(r.stdout).toContain("128 episodes, 0 failed");
  });

  it("runs RAGEN's older command lines as overrides and reports trainer-only keys once", async () => {
    const s = await summary([
      "training.train_batch_size=4",
      "training.n_rollout=8",
      "training.max_turns=5",
      "optimization.kl_coef=0.001",
    ]);
    expect(s.episodes).toBe(32);
    expect(s.metrics).toHaveProperty("train/CoordSokoban/pass@8");
    expect(s.stderr.match(/ignoring trainer-only key optimization\.kl_coef/g)).toHaveLength(1);
  });

  it("writes byte-identical episode files for the same seed and a deterministic policy", async () => {
    const args = [
      "--mode",
      "train",
      "--tag",
      "SimpleSokoban,FrozenLake",
      "--groups",
      "3,2",
      "--group-size",
      "4",
      "--noise",
      "0.3",
    ];
    const a = join(dir, "a.jsonl");
    const b = join(dir, "b.jsonl");
    await summary([...args, "--out", a]);
    await summary([...args, "--out", b]);
    expect(readFileSync(a).equals(readFileSync(b))).toBe(true);
    const lines = readFileSync(a, "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(lines[0]).toMatchObject({
      type: "header",
      format: "rollgym.episodes",
      version: 1,
      seed: 10000,
      group_size: 4,
    });
    expect(lines.filter((l) => l.type === "episode")).toHaveLength(20);
    expect(lines.filter((l) => l.type === "group")).toHaveLength(5);
    expect(lines.at(-1).type).toBe("summary");
    expect(readFileSync(a, "utf8")).not.toMatch(/"timings"|20\d\d-\d\d-\d\dT/);
  });

  it("plays against the mock vLLM engine; every turn parses and the file holds every turn", async () => {
    const out = join(dir, "mock.jsonl");
    const s = await summary([
      "--mode",
      "train",
      "--tag",
      "SimpleSokoban",
      "--groups",
      "4",
      "--group-size",
      "2",
      "--llm",
      engine.url,
      "--model",
      "mock-qwen",
      "--out",
      out,
    ]);
    expect(s.failed).toBe(0);
    const episodes = readFileSync(out, "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l))
      .filter((l) => l.type === "episode");
    expect(episodes).toHaveLength(8);
    for (const e of episodes) {
      expect(e.turns.length).toBeGreaterThan(0);
      for (const t of e.turns) expect(t.actions.length).toBeGreaterThan(0);
      expect(e.turns.length === 5 || e.terminated).toBe(true);
    }
  });

  it("plays a tag added through custom_envs, and names a bad key in its env_config", async () => {
    const config = join(FIXTURES, "config", "custom_env.yaml");
    const s = await summary(["--config", config, "--mode", "val"]);
    expect(s.episodes).toBe(6);
    expect(Object.keys(s.metrics)).toContain("val-env/TinySokoban/success");
    expectUsageError(
      await rollgym(["rollout", "--config", config, "custom_envs.TinySokoban.env_config.num_boxez=2"]),
      ["num_boxez", "num_boxes"],
    );
  });

  it("fails with one line and exit status 1 against a dead endpoint", async () => {
    expectUsageError(
      await rollgym(["rollout", "--llm", "http://127.0.0.1:9/v1", "--model", "m"]),
      ["cannot reach", "127.0.0.1:9"],
      1,
    );
  });

  it("rejects bad input with one line and exit status 2", async () => {
    expectUsageError(await rollgym(["rollout", "--llm", engine.url, "--model", "gpt-9"]), [
      "gpt-9",
      "not served",
      "mock-qwen",
    ]);
    expectUsageError(await runInProcess(["rollout", "agent_proxy.max_turnz=3"]), ["agent_proxy.max_turnz"]);
    expectUsageError(await runInProcess(["rollout", "agent_proxy.max_turn=0"]), ["agent_proxy.max_turn"]);
    expectUsageError(await runInProcess(["rollout", "agent_proxy.batch_adjust_mode=delete"]), [
      "agent_proxy.batch_adjust_mode",
      "not support",
    ]);
    expectUsageError(await runInProcess(["rollout", "--tag", "Nope"]), ["Nope"]);
    expectUsageError(await runInProcess(["rollout", "--tag", "Bandit", "--groups", "2,3"]), ["--groups"]);
    expectUsageError(await runInProcess(["rollout", "--config", join(dir, "missing.yaml")]), [
      "missing.yaml",
    ]);
  });
});
