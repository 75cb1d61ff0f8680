// The OpenAI-compatible chat policy against the mock vLLM engine: RAGEN-format answers,
// retries through injected faults, clear failure reasons, and reproducibility.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import { ChatPolicy } from "../../src/llm/openai-chat.ts";
import { PolicyError } from "../../src/llm/policy.ts";
import { startMockEngine } from "../../src/mock-engine/server.ts";
import { type BatchRequest, runBatch } from "../../src/rollout/batch.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";

const registry = createRegistry();

function request(groups: number, groupSize = 4): BatchRequest {
  const base = defaultBatchRequest("train", { tags: [{ tag: "SimpleSokoban", groups }], groupSize });
  return { ...base, sampling: { ...base.sampling, max_tokens: 64 } };
}

describe("chat policy against the mock engine", () => {
  let engine: Awaited<ReturnType<typeof startMockEngine>>;
  let faulty: Awaited<ReturnType<typeof startMockEngine>>;

  beforeAll(async () => {
    engine = await startMockEngine({ model: "mock-qwen", seed: 3 });
    faulty = await startMockEngine({
      model: "mock-qwen",
      seed: 5,
      errorRate: 0.1,
      dropRate: 0.05,
      slowRate: 0.05,
      slowMs: 300,
    });
  });
  afterAll(async () => {
    await engine?.close();
    await faulty?.close();
  });

  it("plays a batch whose every turn parses into valid actions", async () => {
    const policy = new ChatPolicy({ baseURL: engine.url, model: "mock-qwen", concurrency: 8 });
    await policy.preflight();
    const batch = await runBatch(registry, request(4), policy);
    expect(batch.failed).toBe(0);
    for (const e of batch.episodes) {
      expect(e.turns.length).toBeGreaterThan(0);
      for (const t of e.turns) {
        expect(t.raw_response.startsWith("<think>")).toBe(true);
        expect(t.format_penalty).toBe(false);
        expect(t.actions.length).toBeGreaterThan(0);
      }
    }
  });

  it("gives the same batch twice for the same seed", async () => {
    const policy = new ChatPolicy({ baseURL: engine.url, model: "mock-qwen", concurrency: 8 });
    const a = await runBatch(registry, request(3), policy);
    const b = await runBatch(registry, request(3), policy);
    expect(JSON.stringify(a.episodes)).toBe(JSON.stringify(b.episodes));
  });

  it("survives 10% 5xx, 5% dropped connections and slow tails: each episode finishes or fails with a reason, once", async () => {
    const policy = new ChatPolicy({
      baseURL: faulty.url,
      model: "mock-qwen",
      concurrency: 16,
      maxRetries: 6,
      backoffMs: 2,
      maxBackoffMs: 20,
      timeoutMs: 5_000,
    });
    const batch = await runBatch(registry, request(16), policy);
    expect(batch.episodes).toHaveLength(64);
    expect(new Set(batch.episodes.map((e) => e.env_id)).size).toBe(64);
    for (const e of batch.episodes) {
      if (e.failure === null) expect(e.terminated || e.turns.length === 5).toBe(true);
      else expect(e.failure).toMatch(/^turn \d: .+/);
    }
    expect(policy.stats.retries).toBeGreaterThan(0);
    const faults = faulty.stats();
    expect(faults.internalErrors + faults.unavailable + faults.dropped).toBeGreaterThan(0);
    // Each completed turn was answered once: turns recorded = successful requests.
    const turns = batch.episodes.reduce((n, e) => n + e.turns.length, 0);
    expect(turns).toBe(policy.stats.requests - policy.stats.retries - policy.stats.failures);
  });

  it("reports an episode as failed with the reason once retries run out", async () => {
    const broken = await startMockEngine({ model: "mock-qwen", seed: 1, errorRate: 1 });
    try {
      const policy = new ChatPolicy({ baseURL: broken.url, model: "mock-qwen", maxRetries: 2, backoffMs: 1 });
      const batch = await runBatch(registry, request(1, 2), policy);
      expect(batch.failed).toBe(2);
      for (const e of batch.episodes)
        expect(e.failure).toMatch(/^turn 1: HTTP 5\d\d: .*\(gave up after 3 attempts in [\d.]+ s\)$/);
    } finally {
      await broken.close();
    }
  });

  it("preflight names an unknown model and an unreachable endpoint", async () => {
    await expect(new ChatPolicy({ baseURL: engine.url, model: "nope" }).preflight()).rejects.toThrow(
      /model "nope" is not served by .* \(it serves: mock-qwen\)/,
    );
    const unreachable = new ChatPolicy({ baseURL: "http://127.0.0.1:9/v1", model: "x" });
    await expect(unreachable.preflight()).rejects.toBeInstanceOf(PolicyError);
    await expect(unreachable.preflight()).rejects.toThrow(/cannot reach http:\/\/127\.0\.0\.1:9\/v1/);
  });
});
