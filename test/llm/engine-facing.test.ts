// Engine-facing defects of the chat policy (issue 18), each against the mock vLLM engine or a
// bare capture server: a forced dialect the routes contradict, extra_body keys that would undo
// the fitted request, rendering fields /tokenize must see, per-request seeds, a gateway without
// /tokenize, and a context limit that shrinks while a server runs.
import { once } from "node:events";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import { loadConfig } from "../../src/config/index.ts";
import { ChatPolicy } from "../../src/llm/openai-chat.ts";
import { type MockEngine, startMockEngine } from "../../src/mock-engine/server.ts";
import { type BatchRequest, runBatch } from "../../src/rollout/batch.ts";
import { resolveRequest } from "../../src/rollout/request.ts";
import { type Gateway, startGateway } from "../helpers/gateway.ts";
import { recordingPolicy, singleRequest } from "../helpers/recording-policy.ts";

const registry = createRegistry();

describe("a forced dialect the engine's routes contradict", () => {
  let engine: MockEngine;
  beforeAll(async () => {
    engine = await startMockEngine({ model: "mock" });
  });
  afterAll(async () => {
    await engine?.close();
  });

  it("warns at preflight when dialect=llamacpp meets an engine whose /props answers 404, naming the fix", async () => {
    const forced = new ChatPolicy({ baseURL: engine.url, model: "mock", dialect: "llamacpp" });
    const info = await forced.preflight();
    await forced.close();
    expect(info.warnings).toHaveLength(1);
    expect(info.warnings[0]).toMatch(/rollgym\.llm\.dialect=llamacpp, but http:.*\/props answered HTTP 404/);
    expect(info.warnings[0]).toMatch(/repetition penalty/);
    expect(info.warnings[0]).toMatch(/set rollgym\.llm\.dialect=auto \(or vllm\)/);
    const detected = new ChatPolicy({ baseURL: engine.url, model: "mock" });
    expect((await detected.preflight()).warnings).toEqual([]);
    await detected.close();
  });
});

describe("extra_body", () => {
  let engine: MockEngine;
  beforeAll(async () => {
    engine = await startMockEngine({ model: "mock", maxModelLen: 4096 });
  });
  afterAll(async () => {
    await engine?.close();
  });

  it("refuses keys rollgym sets per turn, naming the key and the config key to use", () => {
    const make = (extraBody: Record<string, unknown>) => () =>
      new ChatPolicy({ baseURL: engine.url, model: "mock", extraBody });
    // Merged last, a max_tokens here would override the fitted budget (a 400 past the window).
    expect(make({ max_tokens: 8000 })).toThrow(
      /rollgym\.llm\.extra_body\.max_tokens: .*set it with actor_rollout_ref\.rollout\.response_length/,
    );
    expect(make({ top_k: 5 })).toThrow(/extra_body\.top_k: .*actor_rollout_ref\.rollout\.top_k/);
    expect(make({ seed: 1 })).toThrow(/extra_body\.seed: .*rollgym\.llm\.request_seeds=false/);
    expect(make({ chat_template_kwargs: { enable_thinking: false }, min_tokens: 2 })).not.toThrow();
  });

  it("sends tools to /tokenize with the messages, so counts equal the prompt the chat route renders", async () => {
    const tools = [
      {
        type: "function",
        function: {
          name: "push",
          description: "Push the box one step in a direction and report the new grid.",
          parameters: { type: "object", properties: { direction: { type: "string" } } },
        },
      },
    ];
    const policy = new ChatPolicy({
      baseURL: engine.url,
      model: "mock",
      extraBody: { tools, tool_choice: "none" },
    });
    await policy.preflight();
    const request = singleRequest("go");
    const counted = await policy.meter!.count(request.messages, request.prefill);
    const answered = await policy.generate(request);
    await policy.close();
    expect(answered.promptTokens).toBeGreaterThan(40);
    expect(counted).toBe(answered.promptTokens);
  });
});

describe("rendering fields vLLM's /tokenize has no field for", () => {
  it("travel inside chat_template_kwargs, where vLLM's chat route hands them to the template", async () => {
    const bodies: Record<string, unknown>[] = [];
    const server = createServer((req, res) => {
      let text = "";
      req.on("data", (chunk) => {
        text += chunk;
      });
      req.on("end", () => {
        res.setHeader("content-type", "application/json");
        if (req.url === "/v1/models") {
          res.end(JSON.stringify({ data: [{ id: "m", max_model_len: 4096 }] }));
          return;
        }
        bodies.push({ path: req.url, ...JSON.parse(text) });
        res.end(JSON.stringify({ count: 7, max_model_len: 4096 }));
      });
    });
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    const documents = [{ title: "rules", text: "Push every box onto a target." }];
    const policy = new ChatPolicy({
      baseURL: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`,
      model: "m",
      dialect: "vllm",
      extraBody: { documents, reasoning_effort: "low", chat_template_kwargs: { enable_thinking: false } },
    });
    try {
      await policy.preflight();
      expect(await policy.meter!.count([{ role: "user", content: "go" }], "<think>")).toBe(7);
      expect(bodies).toHaveLength(1);
      expect(bodies[0]).toMatchObject({
        path: "/tokenize",
        chat_template_kwargs: { documents, reasoning_effort: "low", enable_thinking: false },
      });
      expect(bodies[0]).not.toHaveProperty("documents");
    } finally {
      await policy.close();
      server.close();
    }
  });
});

function tenTurns(window: number, extra: string[] = []): BatchRequest {
  const { config } = loadConfig({
    overrides: [
      "es_manager.train.env_configs.tags=[CoordSokoban]",
      "es_manager.train.env_groups=2",
      "es_manager.train.env_configs.n_groups=[2]",
      "es_manager.train.group_size=2",
      "agent_proxy.max_turn=10",
      `actor_rollout_ref.rollout.max_model_len=${window}`,
      ...extra,
    ],
  });
  return resolveRequest(config);
}

describe("behind a gateway that forwards only /v1/*", () => {
  let engine: MockEngine;
  let gateway: Gateway;
  beforeAll(async () => {
    engine = await startMockEngine({ model: "mock", seed: 7, maxModelLen: 4096 });
    gateway = await startGateway(engine.url, { v1Only: true });
  });
  afterAll(async () => {
    await gateway?.close();
    await engine?.close();
  });

  it("fails episodes with an error naming /tokenize and the count_tokens=usage way out", async () => {
    const policy = new ChatPolicy({ baseURL: gateway.url, model: "mock" });
    await policy.preflight();
    const batch = await runBatch(registry, tenTurns(4096), policy);
    await policy.close();
    expect(batch.failed).toBe(batch.episodes.length);
    for (const e of batch.episodes) {
      expect(e.failure).toMatch(/POST http:\/\/127\.0\.0\.1:\d+\/tokenize answered HTTP 404: Not Found/);
      expect(e.failure).toMatch(/forward \/tokenize too, or set rollgym\.llm\.count_tokens=usage/);
    }
  });

  it("with count_tokens=usage plays without a request outside /v1, fitting prompts to the window", async () => {
    const window = 1600;
    const chat = new ChatPolicy({
      baseURL: gateway.url,
      model: "mock",
      maxModelLen: window,
      countTokens: "usage",
    });
    await chat.preflight();
    const before = gateway.seen.length;
    const { policy, requests } = recordingPolicy(chat);
    const batch = await runBatch(registry, tenTurns(window), policy);
    await chat.close();
    expect(batch.failed).toBe(0);
    expect(gateway.seen.slice(before).every(({ path }) => path.startsWith("/v1/"))).toBe(true);
    expect(chat.countRequests).toBe(0);
    expect(requests.length).toBeGreaterThan(20);
    for (const r of requests) {
      expect(r.promptTokens! + r.maxTokens).toBeLessThanOrEqual(window);
      // Without engine counts, every "count" is an upper bound on the prompt the engine rendered.
      if (r.counted !== undefined) expect(r.counted).toBeGreaterThanOrEqual(r.promptTokens!);
    }
    // The window bound: later turns left earlier ones out.
    expect(batch.metrics["rollgym/context_shortened_turns"]).toBeGreaterThan(0);
    // Token mode needs /tokenize and is refused with the reason.
    expect(() => chat.tokenEngine()).toThrow(/token mode needs the engine's \/tokenize.*count_tokens=engine/);
  });
});

describe("a context limit that shrinks while the policy lives (vLLM restarted with a smaller --max-model-len)", () => {
  /** 2 × 2 CoordSokoban episodes of up to 3 turns, asking 700 tokens per answer. */
  const longAnswers = (): BatchRequest =>
    resolveRequest(
      loadConfig({
        overrides: [
          "es_manager.train.env_configs.tags=[CoordSokoban]",
          "es_manager.train.env_groups=2",
          "es_manager.train.env_configs.n_groups=[2]",
          "es_manager.train.group_size=2",
          "agent_proxy.max_turn=3",
          "actor_rollout_ref.rollout.response_length=700",
        ],
      }).config,
    );

  async function restarted(smaller: number, port: number): Promise<MockEngine> {
    return startMockEngine({ model: "mock", seed: 7, maxModelLen: smaller, port });
  }

  it("is read again when the engine refuses a prompt for length, and the turn is fitted again", async () => {
    let engine = await startMockEngine({ model: "mock", seed: 7, maxModelLen: 4096 });
    const port = Number(new URL(engine.url).port);
    const policy = new ChatPolicy({ baseURL: engine.url, model: "mock", backoffMs: 20 });
    try {
      expect((await policy.preflight()).contextLength).toBe(4096);
      await engine.close();
      engine = await restarted(1024, port);
      const batch = await runBatch(registry, longAnswers(), policy);
      expect(batch.episodes.map((e) => e.failure)).toEqual([null, null, null, null]);
      expect(policy.meter!.limit).toBe(1024);
      expect(
        Math.max(...batch.episodes.flatMap((e) => e.turns.map((t) => t.prompt_tokens! + 700))),
      ).toBeGreaterThan(1024);
    } finally {
      await policy.close();
      await engine.close();
    }
  });

  it("is read again when a replica comes back from an outage, before any refusal", async () => {
    let engine = await startMockEngine({ model: "mock", seed: 7, maxModelLen: 4096 });
    const port = Number(new URL(engine.url).port);
    const policy = new ChatPolicy({ baseURL: engine.url, model: "mock", backoffMs: 20, maxBackoffMs: 100 });
    try {
      await policy.preflight();
      await engine.close();
      // A short turn (it fits either window) fails on the dead replica until it is taken out;
      // the probe that brings the restarted one back reads its context length.
      const turn = policy.generate(singleRequest("go", { max_tokens: 16 }));
      while (policy.replicas()[0].healthy) await sleep(20);
      engine = await restarted(1024, port);
      expect((await turn).finishReason).toMatch(/stop|length/);
      expect(policy.meter!.limit).toBe(1024);
      // Later turns are fitted to it from the start: the engine refuses none.
      const batch = await runBatch(registry, longAnswers(), policy);
      expect(batch.failed).toBe(0);
      expect(engine.stats().rejected).toBe(0);
    } finally {
      await policy.close();
      await engine.close();
    }
  });
});
