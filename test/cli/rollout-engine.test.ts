// `rollgym rollout` against engines that fail, several replicas and engine-side config keys,
// through npx as a user runs it.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type MockEngine, startMockEngine } from "../../src/mock-engine/server.ts";
import { rollgym } from "../helpers/cli.ts";

describe.concurrent("rollgym rollout against engines", () => {
  let broken: MockEngine;
  let replicas: MockEngine[];
  beforeAll(async () => {
    broken = await startMockEngine({ model: "mock", errorRate: 1 });
    replicas = await Promise.all([1, 2].map((seed) => startMockEngine({ model: "mock", seed })));
  });
  afterAll(async () => {
    await broken?.close();
    for (const r of replicas ?? []) await r.close();
  });

  it("prints the result, then one line saying why, and exits 1 when every group failed", async () => {
    const r = await rollgym([
      "rollout",
      "--llm",
      broken.url,
      "--model",
      "mock",
      "--tag",
      "SimpleSokoban",
      "--groups",
      "2",
      "--group-size",
      "2",
      "rollgym.llm.retry_budget_s=0.5",
      "--json",
    ]);
    expect(r.code).toBe(1);
    const result = JSON.parse(r.stdout) as { episodes: number; failed: number };
    expect(result).toMatchObject({ episodes: 4, failed: 4 });
    const last = r.stderr.trimEnd().split("\n").at(-1)!;
    // The broken engine answers 500 or 503 at random; which one came last depends on timing.
    expect(last).toMatch(/^rollgym: every group failed \(first failure: turn 1: .*HTTP 50[03]: .*\)$/);
    expect(r.stderr).not.toMatch(/\bat .*:\d+:\d+/);
  });

  it("spreads over replicas given as --llm URL1,URL2 and accepts extra_body keys", async () => {
    const r = await rollgym([
      "rollout",
      "--llm",
      replicas.map((e) => e.url).join(","),
      "--model",
      "mock",
      "--tag",
      "SimpleSokoban",
      "--groups",
      "4",
      "--group-size",
      "4",
      "rollgym.llm.extra_body.chat_template_kwargs.enable_thinking=true",
      "--json",
    ]);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ episodes: 16, failed: 0 });
    for (const engine of replicas) expect(engine.stats().completed).toBeGreaterThan(0);
    expect(r.stderr).toMatch(/vllm engine at .*, context 32768 tokens/);
  });

  /** One SimpleSokoban group of one against the first replica, with `extra` arguments. */
  const oneEpisode = (...extra: string[]) =>
    rollgym([
      "rollout",
      "--llm",
      replicas[0].url,
      "--model",
      "mock",
      "--tag",
      "SimpleSokoban",
      "--groups",
      "1",
      "--group-size",
      "1",
      ...extra,
    ]);

  it("warns on stderr when dialect=llamacpp is forced against vLLM, whose /props answers 404", async () => {
    const r = await oneEpisode("rollgym.llm.dialect=llamacpp", "--json");
    expect(r.stderr).toMatch(
      /rollgym: warning: rollgym\.llm\.dialect=llamacpp, but .*\/props answered HTTP 404.*set rollgym\.llm\.dialect=auto \(or vllm\)/,
    );
  });

  it.each([
    [
      ["rollgym.llm.extra_body.max_tokens=8000"],
      /rollgym\.llm\.extra_body\.max_tokens.*actor_rollout_ref\.rollout\.response_length/,
    ],
    [
      ["--tokens", "rollgym.llm.count_tokens=usage"],
      /--tokens \(rollgym\.tokens\).*token mode needs the engine's \/tokenize/,
    ],
    [
      ["rollgym.llm.count_tokens=usage", "rollgym.context.truncation=ragen"],
      /truncation=ragen.* counts every prompt exactly.*allowed: truncation=turns, or count_tokens=engine/,
    ],
  ])("refuses %j at start with exit 2 and the reason", async (extra, message) => {
    const r = await oneEpisode(...extra);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
  });

  it("built-in policies answer with agent_proxy.action_sep", async () => {
    const r = await rollgym([
      "rollout",
      "--tag",
      "SimpleSokoban",
      "--groups",
      "4",
      "agent_proxy.action_sep=,",
      "--json",
    ]);
    expect(r.code, r.stderr).toBe(0);
    const { metrics } = JSON.parse(r.stdout) as { metrics: Record<string, number> };
    // The oracle solves SimpleSokoban when its "Up , Left" answers parse.
    expect(metrics["train/SimpleSokoban/success"]).toBe(1);
    expect(metrics["train/SimpleSokoban/action_is_valid"]).toBe(1);
  });
});
