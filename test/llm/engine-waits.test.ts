// Retries are for transient faults only: an answer rollgym cannot use (the same prompt and seed
// give it again) ends the episode after at most two requests for that turn, with the reason;
// while requests do wait on the engine (retries, replicas down), the progress bar and /healthz
// say so instead of standing still.
import { request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import { ChatPolicy } from "../../src/llm/openai-chat.ts";
import { type MockEngine, startMockEngine } from "../../src/mock-engine/server.ts";
import { runBatch } from "../../src/rollout/batch.ts";
import { buildServer } from "../../src/server/app.ts";
import { rollgym } from "../helpers/cli.ts";
import { engineProxy } from "../helpers/engine-proxy.ts";
import { playAgainst, sokobanBatch } from "../helpers/play.ts";

const registry = createRegistry();

const request1x2 = (tokens: boolean) => sokobanBatch(1, 2, 32, tokens);

describe("answers rollgym cannot use", () => {
  let engine: MockEngine;
  beforeAll(async () => {
    engine = await startMockEngine({ model: "mock", seed: 3, tokenizer: "qwen3" });
  }, 60_000);
  afterAll(async () => {
    await engine.close();
  });

  it("token mode: logprobs that do not fit the ids end the episode after two requests for the turn", async () => {
    const proxy = await engineProxy(engine.url.replace(/\/v1$/, ""), ({ path, answer }) => {
      if (path !== "/v1/completions") return;
      const choice = (answer.choices as { logprobs: { token_logprobs: number[] } }[])[0];
      choice.logprobs.token_logprobs.pop();
    });
    try {
      // A retry budget of an hour: were the answer retried like an outage, this would hang.
      const batch = await playAgainst(
        {
          baseURL: `${proxy.url}/v1`,
          model: "mock",
          concurrency: 4,
          retryBudgetMs: 3_600_000,
          backoffMs: 1,
        },
        request1x2(true),
      );
      expect(batch.failed).toBe(2);
      for (const e of batch.episodes) {
        expect(e.failure).toMatch(
          /logprobs for \d+ tokens .*twice; an answer like this is not retried further/,
        );
      }
      expect(proxy.hits("/v1/completions")).toBe(4); // two episodes, one turn each, two requests per turn
    } finally {
      await proxy.close();
    }
  });

  it("chat mode: an answer without choices ends the episode after two requests for the turn", async () => {
    const proxy = await engineProxy(engine.url.replace(/\/v1$/, ""), ({ path, answer }) => {
      if (path === "/v1/chat/completions") answer.choices = [];
    });
    try {
      const batch = await playAgainst(
        {
          baseURL: `${proxy.url}/v1`,
          model: "mock",
          concurrency: 4,
          retryBudgetMs: 3_600_000,
          backoffMs: 1,
        },
        request1x2(false),
      );
      expect(batch.failed).toBe(2);
      for (const e of batch.episodes) expect(e.failure).toMatch(/the response has no choices .*twice/);
      expect(proxy.hits("/v1/chat/completions")).toBe(4);
    } finally {
      await proxy.close();
    }
  });
});

describe("waiting on the engine is visible", () => {
  let engine: MockEngine;
  beforeAll(async () => {
    // Every answer a 500 or 503: requests keep retrying within their budget.
    engine = await startMockEngine({ model: "mock", seed: 3, errorRate: 1 });
  });
  afterAll(async () => {
    await engine.close();
  });

  it("/healthz names the requests retrying and the last error while a rollout waits", async () => {
    const policy = new ChatPolicy({
      baseURL: engine.url,
      model: "mock",
      concurrency: 4,
      retryBudgetMs: 60_000,
      backoffMs: 200,
    });
    const server = await buildServer({ policy });
    const base = await server.listen();
    const controller = new AbortController();
    const run = runBatch(registry, request1x2(false), policy, { signal: controller.signal });
    try {
      let health: { status: string; engine?: { retrying: number; last_error: string | null } } = {
        status: "",
      };
      for (let i = 0; i < 200; i++) {
        health = (await (await request(`${base}/healthz`)).body.json()) as typeof health;
        if ((health.engine?.retrying ?? 0) > 0) break;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect(health.status).toBe("ok");
      expect(health.engine?.retrying).toBeGreaterThan(0);
      expect(health.engine?.last_error).toMatch(/HTTP 50[03]/);
    } finally {
      controller.abort();
      await run;
      await server.app.close();
      await policy.close();
    }
    // Nothing waits any more: the figures say so.
    expect(policy.engineStatus()).toMatchObject({ retrying: 0, last_error: null });
  });

  it("the rollout's progress bar reports the wait instead of freezing", async () => {
    const result = await rollgym([
      "rollout",
      "--llm",
      engine.url,
      "--model",
      "mock",
      "--tag",
      "SimpleSokoban",
      "--groups",
      "1",
      "--group-size",
      "2",
      "rollgym.llm.retry_budget_s=7",
    ]);
    expect(result.code, result.stderr).toBe(1);
    // How the wait splits at the tick that prints (replica down or probed, requests retrying,
    // in flight or waiting for a replica) depends on timing; that the bar shows it does not.
    expect(result.stderr).toMatch(/waiting on the engine: [^\n]*\(last error: HTTP 50[03]/);
  }, 60_000);
});
