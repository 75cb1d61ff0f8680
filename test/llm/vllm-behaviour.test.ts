// The chat policy against the mock engine doing what a stock vLLM does: generation-config
// defaults for omitted fields, `abort` answers, reasoning parsers, the older flat error shape.

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import { defaultConfig } from "../../src/config/index.ts";
import { ChatPolicy } from "../../src/llm/openai-chat.ts";
import { PolicyError } from "../../src/llm/policy.ts";
import { type MockEngine, startMockEngine } from "../../src/mock-engine/server.ts";
import type { BatchResult } from "../../src/record/episode-record.ts";
import { type BatchRequest, runBatch } from "../../src/rollout/batch.ts";
import { resolveRequest } from "../../src/rollout/request.ts";
import { singleRequest } from "../helpers/recording-policy.ts";

const registry = createRegistry();

function smallBatch(groups = 4, maxTokens?: number): BatchRequest {
  const config = defaultConfig();
  config.es_manager.train = {
    env_groups: groups,
    group_size: 4,
    env_configs: { tags: ["SimpleSokoban"], n_groups: [groups] },
  };
  const request = resolveRequest(config);
  return maxTokens ? { ...request, sampling: { ...request.sampling, max_tokens: maxTokens } } : request;
}

async function rollout(
  engine: MockEngine,
  request: BatchRequest,
): Promise<{ batch: BatchResult; policy: ChatPolicy }> {
  const policy = new ChatPolicy({ baseURL: engine.url, model: "mock", backoffMs: 1 });
  await policy.preflight();
  const batch = await runBatch(registry, request, policy);
  await policy.close();
  return { batch, policy };
}

/** What a trainer learns from: each episode's turns, score and the batch metrics. */
function learned(batch: BatchResult) {
  return {
    episodes: batch.episodes.map((e) => ({
      score: e.score,
      turns: e.turns.map((t) => ({ raw: t.raw_response, actions: t.actions, reward: t.reward })),
    })),
    metrics: batch.metrics,
  };
}

describe("server generation-config defaults", () => {
  let engine: MockEngine;
  beforeAll(async () => {
    // Qwen2.5-Instruct's generation_config.json sets a repetition penalty; the others make the point.
    engine = await startMockEngine({
      model: "mock",
      generationConfig: {
        repetition_penalty: 1.05,
        presence_penalty: 0.5,
        frequency_penalty: 0.5,
        temperature: 0.7,
        top_p: 0.8,
        top_k: 20,
        min_p: 0.1,
      },
    });
  });
  afterAll(async () => {
    await engine?.close();
  });

  it("affect no request of a default rollout, while a request that omits them is affected", async () => {
    const { batch } = await rollout(engine, smallBatch());
    expect(batch.failed).toBe(0);
    const stats = engine.stats();
    expect(stats.completed).toBeGreaterThan(16);
    expect(stats.defaultsApplied).toBe(0);

    // The control: a request that leaves the penalties out.
    const response = await fetch(`${engine.url}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "mock", messages: [{ role: "user", content: "hi" }], max_tokens: 8 }),
    });
    expect(response.status).toBe(200);
    expect(response.headers.get("x-mock-defaults-applied")).toContain("repetition_penalty");
    expect(engine.stats().defaultsApplied).toBe(1);
    expect(engine.stats().defaultsAppliedByField.presence_penalty).toBe(1);
  });
});

describe("abort answers", () => {
  let clean: MockEngine;
  let aborting: MockEngine;
  beforeAll(async () => {
    clean = await startMockEngine({ model: "mock", seed: 11 });
    aborting = await startMockEngine({ model: "mock", seed: 11, abortRate: 0.2 });
  });
  afterAll(async () => {
    await clean?.close();
    await aborting?.close();
  });

  it("are never scored: 20% aborts give the same episodes, scores and metrics as none", async () => {
    const a = await rollout(clean, smallBatch(8));
    const b = await rollout(aborting, smallBatch(8));
    expect(aborting.stats().injectedAborts).toBeGreaterThan(10);
    expect(b.policy.stats.aborts).toBe(aborting.stats().injectedAborts);
    expect(b.batch.failed).toBe(0);
    expect(learned(b.batch)).toEqual(learned(a.batch));
  });
});

describe("reasoning parsers", () => {
  let plain: MockEngine;
  const parsers: Record<string, MockEngine> = {};
  beforeAll(async () => {
    // Short max_tokens cut some answers before </think>: the split that cannot be undone.
    plain = await startMockEngine({ model: "mock", seed: 5, formatErrorRate: 0.2 });
    for (const name of ["qwen3", "deepseek_r1"] as const)
      parsers[name] = await startMockEngine({
        model: "mock",
        seed: 5,
        formatErrorRate: 0.2,
        reasoningParser: name,
      });
  });
  afterAll(async () => {
    await plain?.close();
    for (const engine of Object.values(parsers)) await engine.close();
  });

  for (const name of ["qwen3", "deepseek_r1"]) {
    it(`${name}: raw_response holds only generated text; ambiguous splits are flagged`, async () => {
      const reference = (await rollout(plain, smallBatch(8, 12))).batch;
      const split = (await rollout(parsers[name], smallBatch(8, 12))).batch;
      let flagged = 0;
      let exact = 0;
      split.episodes.forEach((episode, i) => {
        const truth = reference.episodes[i].turns;
        // Turns agree up to the first flagged one (after it the histories may differ).
        for (const [k, turn] of episode.turns.entries()) {
          if (turn.ambiguous_split) {
            flagged++;
            // Never invented: what was kept is exactly what the engine generated, up to where it stops.
            expect(truth[k].raw_response.startsWith(turn.raw_response)).toBe(true);
            break;
          }
          exact++;
          expect(turn.raw_response).toBe(truth[k].raw_response);
        }
      });
      expect(flagged).toBeGreaterThan(0);
      expect(exact).toBeGreaterThan(flagged);
    });
  }
});

describe("errors", () => {
  let flat: MockEngine;
  beforeAll(async () => {
    flat = await startMockEngine({ model: "mock", errorShape: "flat" });
  });
  afterAll(async () => {
    await flat?.close();
  });

  it("keep their message in vLLM's older flat shape", async () => {
    const policy = new ChatPolicy({ baseURL: flat.url, model: "mock" });
    await policy.preflight();
    // vLLM refuses a negative repetition penalty with a 400 naming it.
    const error = await policy
      .generate(singleRequest("hi", { repetition_penalty: -1 }))
      .catch((e: unknown) => e);
    await policy.close();
    expect(error).toBeInstanceOf(PolicyError);
    expect((error as Error).message).toMatch(/^HTTP 400: .*repetition_penalty/);
    expect((error as Error).message).not.toContain("no body");
  });
});
