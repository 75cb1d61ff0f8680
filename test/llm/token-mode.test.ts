// Token in, token out, checked from the engine's side: the mock vLLM engine echoes the prompt
// ids it received (they must be the log), llama.cpp reports its prefix-cache reuse (it must
// cover the whole previous sequence), both decode the log back to the recorded text, and the
// template-drift figure is 0 for ChatML and reported for Qwen3's and a history-rewriting one.
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import { ragenGrammar, startLlamaServer } from "../../scripts/llama/server.ts";
import { ChatPolicy } from "../../src/llm/openai-chat.ts";
import type { TokenEngine } from "../../src/llm/token-engine.ts";
import { QWEN3_IM_END_ID } from "../../src/mock-engine/qwen3-tokenizer.ts";
import { type MockEngine, startMockEngine } from "../../src/mock-engine/server.ts";
import type { BatchResult, EpisodeRecord } from "../../src/record/episode-record.ts";
import { type BatchRequest, runBatch } from "../../src/rollout/batch.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";
import { engineProxy } from "../helpers/engine-proxy.ts";
import { FIXTURES } from "../helpers/fixtures.ts";

const registry = createRegistry();

function tokenBatch(groups: number, groupSize: number, maxTokens: number, maxTurn = 5): BatchRequest {
  const base = defaultBatchRequest("train", { tags: [{ tag: "SimpleSokoban", groups }], groupSize });
  return {
    ...base,
    tokens: true,
    episode: { ...base.episode, max_turn: maxTurn },
    sampling: { ...base.sampling, max_tokens: maxTokens },
  };
}

/** The log's invariants, whatever the engine. */
function checkLog(e: EpisodeRecord): void {
  const t = e.tokens!;
  expect(t).toBeDefined();
  const n = t.ids.length;
  for (const field of [t.loss_mask, t.logprobs, t.rewards]) expect(field).toHaveLength(n);
  expect(t.turn_starts).toHaveLength(e.turns.length);
  expect(t.turn_starts[0]).toBe(t.prompt_length);
  let sampled = 0;
  t.turn_starts.forEach((start, k) => {
    const end = t.turn_ends[k];
    expect(end).toBeGreaterThan(start);
    expect(e.turns[k].completion_tokens).toBe(end - start);
    sampled += end - start;
    // The turn's reward sits on its last sampled id.
    expect(t.rewards[end - 1]).toBeCloseTo(e.turns[k].reward, 5);
    if (k > 0) expect(start).toBeGreaterThan(t.turn_ends[k - 1]); // an inserted block in between
  });
  // The mask covers exactly the sampled ids; logprobs sit there and nowhere else.
  expect(t.loss_mask.reduce((a, b) => a + b, 0)).toBe(sampled);
  t.loss_mask.forEach((m, i) => {
    const inTurn = t.turn_starts.some((s, k) => i >= s && i < t.turn_ends[k]);
    expect(m).toBe(inTurn ? 1 : 0);
    if (!m) expect(t.logprobs[i]).toBe(0);
    else if (!Number.isNaN(t.logprobs[i])) expect(t.logprobs[i]).toBeLessThanOrEqual(0);
  });
  expect(t.logprobs.filter(Number.isNaN)).toHaveLength(t.logprobs_missing);
  expect(t.prompt_drift).toBe(0);
}

/** Every multi-turn episode reports drift, and there are some (else the check proves nothing). */
function expectDriftOnMultiTurn(episodes: readonly EpisodeRecord[]): void {
  const multi = episodes.filter((e) => e.turns.length > 1);
  expect(multi.length).toBeGreaterThan(0);
  for (const e of episodes) checkLog(e);
  for (const e of multi) expect(e.tokens!.template_drift).toEqual(expect.any(Number));
}

/**
 * Decoding each turn's sampled ids gives the recorded text (the prefill came from the prompt);
 * a turn that stopped ends with the end-of-generation token, whose text the record leaves out.
 */
async function checkDecoding(engine: TokenEngine, e: EpisodeRecord): Promise<void> {
  const t = e.tokens!;
  for (const [k, turn] of e.turns.entries()) {
    const sampled = t.ids.slice(t.turn_starts[k], t.turn_ends[k]);
    const text = await engine.decode(turn.finish_reason === "stop" ? sampled.slice(0, -1) : sampled, "check");
    expect(`<think>${text}`).toBe(turn.raw_response);
  }
}

describe("token mode against the mock vLLM engine", () => {
  let engine: MockEngine;
  beforeAll(async () => {
    // The real Qwen3 tokenizer, so the ids are the ones production sees.
    engine = await startMockEngine({ model: "mock", seed: 4, tokenizer: "qwen3" });
  });
  afterAll(async () => {
    await engine?.close();
  });

  async function play(
    request: BatchRequest,
    maxModelLen?: number,
  ): Promise<{ batch: BatchResult; policy: ChatPolicy }> {
    const policy = new ChatPolicy({ baseURL: engine.url, model: "mock", concurrency: 16, maxModelLen });
    await policy.preflight();
    const batch = await runBatch(registry, request, policy);
    return { batch, policy };
  }

  it("sends the log itself as every prompt: the engine's prompt_token_ids equal it", async () => {
    const { batch, policy } = await play(tokenBatch(4, 4, 64));
    const tokens = policy.tokenEngine()!;
    expect(batch.failed).toBe(0);
    const turns = batch.episodes.reduce((n, e) => n + e.turns.length, 0);
    expect(tokens.promptEchoes).toBe(turns);
    expect(tokens.promptDrift).toBe(0);
    for (const e of batch.episodes) {
      checkLog(e);
      // The mock's template is ChatML, which keeps earlier turns as they were.
      expect(e.tokens!.template_drift).toBeNull();
    }
    for (const e of batch.episodes.slice(0, 3)) await checkDecoding(tokens, e);
    await policy.close();
  });

  it("counts every turn whose echoed prompt is not the log sent", async () => {
    // An engine that echoes one id off at the end of every prompt.
    const proxy = await engineProxy(engine.url.replace(/\/v1$/, ""), ({ path, answer }) => {
      const choice = (answer.choices as { prompt_token_ids: number[] }[] | undefined)?.[0];
      if (path.endsWith("/v1/completions") && choice)
        choice.prompt_token_ids = [...choice.prompt_token_ids.slice(0, -1), 7];
    });
    const policy = new ChatPolicy({ baseURL: `${proxy.url}/v1`, model: "mock", concurrency: 16 });
    try {
      await policy.preflight();
      const batch = await runBatch(registry, tokenBatch(2, 2, 32, 3), policy);
      const tokens = policy.tokenEngine()!;
      expect(batch.failed).toBe(0);
      const turns = batch.episodes.reduce((n, e) => n + e.turns.length, 0);
      expect(tokens.promptEchoes).toBe(turns);
      expect(tokens.promptDrift).toBe(turns);
      for (const e of batch.episodes) expect(e.tokens!.prompt_drift).toBe(e.turns.length);
    } finally {
      await policy.close();
      await proxy.close();
    }
  });

  it("reports template drift under Qwen3's template, which drops earlier <think> blocks", async () => {
    const qwen3 = await startMockEngine({
      model: "mock",
      seed: 4,
      tokenizer: "qwen3",
      chatTemplate: "qwen3",
    });
    try {
      const policy = new ChatPolicy({ baseURL: qwen3.url, model: "mock", concurrency: 16 });
      await policy.preflight();
      const batch = await runBatch(registry, tokenBatch(2, 2, 64), policy);
      await policy.close();
      expect(batch.failed).toBe(0);
      expectDriftOnMultiTurn(batch.episodes);
    } finally {
      await qwen3.close();
    }
  });

  it("never sends max_tokens past the context: at the boundary it lowers them, then ends context_full", async () => {
    const limit = 700;
    const sent: { prompt: number; maxTokens: number }[] = [];
    const policy = new ChatPolicy({
      baseURL: engine.url,
      model: "mock",
      concurrency: 16,
      maxModelLen: limit,
    });
    await policy.preflight();
    const tokens = policy.tokenEngine()!;
    const generate = tokens.generate.bind(tokens);
    tokens.generate = (promptIds, sampling, affinity, signal) => {
      sent.push({ prompt: promptIds.length, maxTokens: sampling.max_tokens });
      return generate(promptIds, sampling, affinity, signal);
    };
    const batch = await runBatch(registry, { ...tokenBatch(2, 4, 200, 10), minResponseTokens: 40 }, policy);
    await policy.close();
    expect(batch.failed).toBe(0);
    for (const r of sent) expect(r.prompt + r.maxTokens).toBeLessThanOrEqual(limit);
    // Some request was cut to exactly the room left, and episodes ended on the window.
    expect(sent.some((r) => r.maxTokens < 200 && r.prompt + r.maxTokens === limit)).toBe(true);
    const full = batch.episodes.filter((e) => e.end_reason === "context_full");
    expect(full.length).toBeGreaterThan(0);
    for (const e of full) {
      checkLog(e);
      expect(e.tokens!.ids.length + 40).toBeGreaterThan(limit);
      // The log ends in the next turn's prompt; it is still the template's rendering.
      expect(e.tokens!.template_drift).toBeNull();
    }
  });

  it("at the engine's own limit (max_model_len auto) no request is refused for length", async () => {
    const small = await startMockEngine({ model: "mock", seed: 4, tokenizer: "qwen3", maxModelLen: 700 });
    try {
      // dialect vllm: no GET /props probe, so every request the engine refuses would count below.
      const policy = new ChatPolicy({ baseURL: small.url, model: "mock", concurrency: 16, dialect: "vllm" });
      expect((await policy.preflight()).contextLength).toBe(700);
      const batch = await runBatch(registry, { ...tokenBatch(2, 4, 200, 10), minResponseTokens: 40 }, policy);
      await policy.close();
      expect(batch.failed).toBe(0);
      expect(small.stats().rejected).toBe(0);
      expect(batch.episodes.some((e) => e.end_reason === "context_full")).toBe(true);
    } finally {
      await small.close();
    }
  });

  it("aborted answers are re-requested, never logged: 20% aborts give the same logs as none", async () => {
    const aborting = await startMockEngine({ model: "mock", seed: 4, tokenizer: "qwen3", abortRate: 0.2 });
    try {
      const policy = new ChatPolicy({ baseURL: aborting.url, model: "mock", concurrency: 16, backoffMs: 1 });
      await policy.preflight();
      const batch = await runBatch(registry, tokenBatch(4, 4, 64), policy);
      const reference = (await play(tokenBatch(4, 4, 64))).batch;
      await policy.close();
      expect(aborting.stats().injectedAborts).toBeGreaterThan(5);
      expect(batch.failed).toBe(0);
      expect(batch.episodes.map((e) => e.tokens!.ids)).toEqual(reference.episodes.map((e) => e.tokens!.ids));
      // An abort is the engine pausing, not the replica failing: it stays in rotation.
      expect(policy.replicas().every((r) => r.healthy && r.failures === 0)).toBe(true);
    } finally {
      await aborting.close();
    }
  });

  it("without retention (stream delivery) each group hands on its logs and the result keeps none, while metrics and the verdict stay whole", async () => {
    const policy = new ChatPolicy({ baseURL: engine.url, model: "mock", concurrency: 16 });
    await policy.preflight();
    const handed: EpisodeRecord[] = [];
    const slim = await runBatch(registry, tokenBatch(3, 2, 32, 2), policy, {
      retainEpisodes: false,
      onGroup: (_group, records) => handed.push(...records),
    });
    const whole = await runBatch(registry, tokenBatch(3, 2, 32, 2), policy);
    await policy.close();
    expect(handed).toHaveLength(6);
    for (const e of handed) checkLog(e);
    // Held until the batch ends, the logs of a long stream would grow with it.
    expect(slim.episodes.every((e) => e.tokens === undefined && e.turns.length === 0)).toBe(true);
    expect(slim.metrics).toEqual(whole.metrics);
    expect(slim.groups).toEqual(whole.groups);
  });

  it("a cancelled rollout leaves the engine's shared renders intact for the next one", async () => {
    const policy = new ChatPolicy({ baseURL: engine.url, model: "mock", concurrency: 16 });
    await policy.preflight();
    const controller = new AbortController();
    let turns = 0;
    const cancelled = await runBatch(registry, tokenBatch(2, 4, 64), policy, {
      signal: controller.signal,
      onTurn: () => {
        if (++turns === 1) controller.abort();
      },
    });
    expect(cancelled.episodes.some((e) => e.failure === "cancelled")).toBe(true);
    const next = await runBatch(registry, tokenBatch(2, 4, 64), policy);
    await policy.close();
    expect(next.failed).toBe(0);
    for (const e of next.episodes) checkLog(e);
  });
});

describe("token mode against llama.cpp (real Qwen3 tokenizer)", () => {
  async function play(extraArgs: string[], groups = 2) {
    const server = await startLlamaServer({ ctx: 8192, parallel: 2, threads: 2, extraArgs });
    try {
      const policy = new ChatPolicy({
        baseURL: `${server.baseUrl}/v1`,
        model: server.model,
        concurrency: 2,
        grammar: ragenGrammar("after-think"),
      });
      await policy.preflight();
      const batch = await runBatch(registry, tokenBatch(groups, 2, 48), policy);
      const tokens = policy.tokenEngine()!;
      for (const e of batch.episodes.slice(0, 2)) await checkDecoding(tokens, e);
      await policy.close();
      // Id-space continuations ran on the real engine (the engine-side checks above cover them).
      expect(tokens.fallback).toBeNull();
      const idSpace = batch.episodes.reduce((n, e) => n + (e.tokens!.id_space_continuations ?? 0), 0);
      expect(idSpace).toBeGreaterThan(0);
      return batch;
    } finally {
      await server.stop();
    }
  }

  it("ChatML: exact logs, the engine's cache covers every previous sequence, no template drift", async () => {
    // Two episodes on two slots: each episode keeps its slot, so its prefix stays cached.
    const batch = await play(["--chat-template", "chatml"], 1);
    expect(batch.failed).toBe(0);
    for (const e of batch.episodes) {
      checkLog(e);
      const t = e.tokens!;
      // A turn that ended on <|endoftext|> keeps it where chat inference renders <|im_end|>: that,
      // and only that, is drift (the grammar lets the model end on either).
      const otherEnd = e.turns.some(
        (turn, k) => turn.finish_reason === "stop" && t.ids[t.turn_ends[k] - 1] !== QWEN3_IM_END_ID,
      );
      if (otherEnd) expect(t.template_drift).toEqual(expect.any(Number));
      else expect(t.template_drift).toBeNull();
      for (let k = 1; k < e.turns.length; k++) {
        // llama.cpp never evaluates the last sampled token, so it is the one id not cached.
        expect(e.turns[k].cached_tokens).toBeGreaterThanOrEqual(t.turn_ends[k - 1] - 1);
      }
    }
  }, 300_000);

  it("Qwen3's template (it drops earlier <think> blocks) shows up as template drift per episode", async () => {
    const batch = await play([]);
    expect(batch.failed).toBe(0);
    expectDriftOnMultiTurn(batch.episodes);
  }, 300_000);

  it("a template that rewrites earlier turns is caught", async () => {
    const batch = await play([
      "--chat-template-file",
      join(FIXTURES, "templates", "rewrites-earlier-turns.jinja"),
    ]);
    expect(batch.failed).toBe(0);
    const multi = batch.episodes.filter((e) => e.turns.length > 1);
    expect(multi.length).toBeGreaterThan(0);
    for (const e of multi) expect(e.tokens!.template_drift).toEqual(expect.any(Number));
  }, 300_000);
});
