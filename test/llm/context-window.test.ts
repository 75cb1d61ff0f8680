// The context window: CoordSokoban for 10 turns in a 1,200-token window, against the mock vLLM
// engine and the real llama.cpp server. Prompts are shortened by dropping whole old turns,
// never exceed the window with their max_tokens, are counted exactly as the engine counts
// them, and no episode fails on context.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import { type LlamaServer, ragenGrammar, startLlamaServer } from "../../scripts/llama/server.ts";
import { loadConfig } from "../../src/config/index.ts";
import { ChatPolicy } from "../../src/llm/openai-chat.ts";
import type { Policy, PolicyRequest, PolicyResponse } from "../../src/llm/policy.ts";
import { startMockEngine } from "../../src/mock-engine/server.ts";
import { type BatchRequest, runBatch } from "../../src/rollout/batch.ts";
import { resolveRequest } from "../../src/rollout/request.ts";
import { promptShapeProblems, type RecordedRequest, recordingPolicy } from "../helpers/recording-policy.ts";

const registry = createRegistry();

function tenTurns(extra: string[] = []): BatchRequest {
  const { config } = loadConfig({
    overrides: [
      "es_manager.train.env_configs.tags=[CoordSokoban]",
      "es_manager.train.env_groups=2",
      "es_manager.train.env_configs.n_groups=[2]",
      "es_manager.train.group_size=4",
      "agent_proxy.max_turn=10",
      "actor_rollout_ref.rollout.max_model_len=1200",
      ...extra,
    ],
  });
  return resolveRequest(config);
}

function checkRequests(requests: readonly RecordedRequest[], limit: number, shape: boolean): void {
  for (const r of requests) {
    // Every prompt the engine rendered fits with its max_tokens, counted or fitted on a bound.
    expect(r.promptTokens).toBeDefined();
    expect(r.promptTokens! + r.maxTokens).toBeLessThanOrEqual(limit);
    // A prompt that was counted is counted exactly as the engine counts it.
    if (r.counted !== undefined) expect(r.counted).toBe(r.promptTokens);
    if (shape) expect(promptShapeProblems(r.messages)).toEqual([]);
  }
}

describe("context window against the mock vLLM engine", () => {
  let engine: Awaited<ReturnType<typeof startMockEngine>>;
  beforeAll(async () => {
    // The engine's own window is larger; the configured 1200 is the one that binds.
    engine = await startMockEngine({ model: "mock", seed: 7, maxModelLen: 4096 });
  });
  afterAll(async () => {
    await engine?.close();
  });

  async function play(extra: string[] = []) {
    const chat = new ChatPolicy({ baseURL: engine.url, model: "mock", maxModelLen: 1200 });
    const info = await chat.preflight();
    expect(info.contextLength).toBe(1200);
    const { policy, requests } = recordingPolicy(chat);
    const batch = await runBatch(registry, tenTurns(extra), policy);
    await chat.close();
    return { batch, requests, chat };
  }

  it("drops whole old turns, never fails on context and keeps prompt + max_tokens within the window", async () => {
    const { batch, requests } = await play();
    expect(batch.failed).toBe(0);
    expect(requests.length).toBeGreaterThan(40);
    checkRequests(requests, 1200, true);
    // The window really bound: some prompts were shortened.
    expect(batch.metrics["rollgym/context_shortened_turns"]).toBeGreaterThan(0);
    const dropped = batch.episodes.flatMap((e) => e.turns.map((t) => t.context_dropped ?? 0));
    expect(Math.max(...dropped)).toBeGreaterThan(0);
    for (const e of batch.episodes)
      expect(["done", "action_budget", "max_turn", "context_full"]).toContain(e.end_reason);
  });

  it("in truncation=ragen mode applies RAGEN's rule and still never sends an over-long request", async () => {
    const { batch, requests, chat } = await play(["rollgym.context.truncation=ragen"]);
    expect(batch.failed).toBe(0);
    checkRequests(requests, 1200, false);
    // RAGEN's rule counts every prompt.
    expect(requests.every((r) => r.counted !== undefined)).toBe(true);
    expect(chat.countRequests).toBeGreaterThan(0);
  });

  it("with the real Qwen3 tokenizer and template, prompts fitted on the byte bound still fit", async () => {
    const qwen = await startMockEngine({
      model: "mock",
      seed: 7,
      maxModelLen: 4096,
      tokenizer: "qwen3",
      chatTemplate: "qwen3",
    });
    try {
      const window = 1700;
      const chat = new ChatPolicy({ baseURL: qwen.url, model: "mock", maxModelLen: window });
      await chat.preflight();
      const { policy, requests } = recordingPolicy(chat);
      const batch = await runBatch(
        registry,
        tenTurns([`actor_rollout_ref.rollout.max_model_len=${window}`]),
        policy,
      );
      await chat.close();
      expect(batch.failed).toBe(0);
      checkRequests(requests, window, true);
      // Early turns fit on the bound without a count; later ones, near the window, were counted.
      expect(requests.some((r) => r.counted === undefined)).toBe(true);
      expect(requests.some((r) => r.counted !== undefined && r.messages.length > 2)).toBe(true);
    } finally {
      await qwen.close();
    }
  });

  it("ends an episode as context_full, scored and not failed, when not even its current turn fits", async () => {
    // A first prompt of a few hundred tokens leaves less than the 1,000 response tokens asked for.
    const { batch, requests } = await play([
      "actor_rollout_ref.rollout.response_length=1100",
      "rollgym.llm.min_response_tokens=1000",
    ]);
    expect(batch.failed).toBe(0);
    checkRequests(requests, 1200, true);
    const full = batch.episodes.filter((e) => e.end_reason === "context_full");
    expect(full.length).toBe(batch.episodes.length);
    expect(batch.metrics["rollgym/context_full_episodes"]).toBe(full.length);
    for (const e of full) {
      expect(e.failure).toBeNull();
      expect(e.truncated).toBe(true);
      expect(e.success).toBe(false);
      expect(Number.isFinite(e.score)).toBe(true);
    }
  });
});

describe("context window at the boundary", () => {
  it("lowers max_tokens to exactly the room left, and not below min_response_tokens", async () => {
    // A scripted meter: 700 tokens plus 100 per message.
    const sent: PolicyRequest[] = [];
    const policy: Policy = {
      name: "scripted",
      meter: { limit: 1200, count: async (messages) => 700 + 100 * messages.length },
      async generate(request): Promise<PolicyResponse> {
        sent.push(request);
        return { text: "x</think><answer>Up</answer>", finishReason: "stop" };
      },
    };
    const request = tenTurns(["agent_proxy.max_turn=3", "actor_rollout_ref.rollout.response_length=400"]);
    const batch = await runBatch(registry, { ...request, minResponseTokens: 150 }, policy);
    // Turn 1: 2 messages → 900 tokens, room 300 < 400 and nothing to drop: max_tokens 300.
    // Later turns drop back to the current turn alone (900 tokens) and get 300 again.
    for (const r of sent) expect(r.sampling.max_tokens).toBe(300);
    expect(batch.failed).toBe(0);
    const tight = await runBatch(registry, { ...request, minResponseTokens: 301 }, policy);
    expect(tight.episodes.every((e) => e.end_reason === "context_full" && e.turns.length === 0)).toBe(true);
    expect(tight.failed).toBe(0);
  });
});

describe("context window against llama.cpp", () => {
  let server: LlamaServer;
  beforeAll(async () => {
    // One slot of 1,280 tokens (llama.cpp pads -c to a multiple of 256); the configured 1,200 binds.
    server = await startLlamaServer({ ctx: 1280, parallel: 1, threads: 2 });
  }, 120_000);
  afterAll(async () => {
    await server?.stop();
  });

  it("plays 10-turn CoordSokoban episodes without a context failure; counts equal llama.cpp's", async () => {
    const chat = new ChatPolicy({
      baseURL: `${server.baseUrl}/v1`,
      model: server.model,
      concurrency: 1,
      prefill: "none",
      grammar: ragenGrammar("full"),
      maxModelLen: 1200,
    });
    const info = await chat.preflight();
    expect(info).toMatchObject({ dialect: "llamacpp", contextLength: 1200 });
    const { policy, requests } = recordingPolicy(chat);
    const base = tenTurns(["es_manager.train.env_groups=1", "es_manager.train.env_configs.n_groups=[1]"]);
    const request = { ...base, groupSize: 2, sampling: { ...base.sampling, max_tokens: 96 } };
    const batch = await runBatch(registry, request, policy);
    await chat.close();
    expect(batch.failed).toBe(0);
    expect(requests.length).toBeGreaterThan(4);
    checkRequests(requests, 1200, true);
    expect(batch.metrics["rollgym/context_shortened_turns"]).toBeGreaterThan(0);
  }, 300_000);
});
