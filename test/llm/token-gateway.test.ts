// Token mode as seen on the wire, through a gateway in front of the mock vLLM engine: behind one
// that forwards only /v1/*, episodes fail naming the route that is missing and what to do; and
// the extra body's chat-only fields (include_reasoning) reach the chat route but never
// /v1/completions, whose request model has no such field.
import { afterEach, describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import { ChatPolicy } from "../../src/llm/openai-chat.ts";
import { DEFAULT_MODEL, startMockEngine } from "../../src/mock-engine/server.ts";
import { type BatchRequest, runBatch } from "../../src/rollout/batch.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";
import { startGateway } from "../helpers/gateway.ts";

const registry = createRegistry();
const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((x) => x.close()));
});

function batch(tokens: boolean): BatchRequest {
  const base = defaultBatchRequest("train", { tags: [{ tag: "SimpleSokoban", groups: 1 }], groupSize: 2 });
  return {
    ...base,
    tokens,
    episode: { ...base.episode, max_turn: 2 },
    sampling: { ...base.sampling, max_tokens: 48 },
  };
}

async function through(v1Only: boolean, extraBody: Record<string, unknown> = {}) {
  const engine = await startMockEngine({ tokenizer: "qwen3", seed: 3 });
  open.push(engine);
  const gateway = await startGateway(engine.url, { v1Only });
  open.push(gateway);
  const policy = new ChatPolicy({ baseURL: gateway.url, model: DEFAULT_MODEL, extraBody });
  open.push(policy);
  await policy.preflight();
  return { gateway, policy };
}

describe("token mode behind a gateway that forwards only /v1/*", () => {
  it("fails each episode naming the missing route (method and path) and what to do, not a bare HTTP 404", async () => {
    const { gateway, policy } = await through(true);
    const result = await runBatch(registry, batch(true), policy);
    expect(result.failed).toBe(result.episodes.length);
    const root = new URL(gateway.url).origin;
    for (const e of result.episodes) {
      expect(e.failure).toContain(`POST ${root}/tokenize answered HTTP 404: Not Found`);
      expect(e.failure).toMatch(/token mode needs the engine's routes at the server root, outside \/v1/);
      expect(e.failure).toMatch(/let the gateway forward them too, .*or play in chat mode/);
    }
  });
});

describe("include_reasoning from the extra body", () => {
  it("never reaches /v1/completions in token mode, and still reaches the chat route in chat mode", async () => {
    const extraBody = { include_reasoning: false };
    const tokens = await through(false, extraBody);
    const played = await runBatch(registry, batch(true), tokens.policy);
    expect(played.failed).toBe(0);
    const completions = tokens.gateway.seen.filter((r) => r.path === "/v1/completions");
    expect(completions.length).toBeGreaterThan(0);
    for (const r of completions) expect(r.body).not.toHaveProperty("include_reasoning");

    const chat = await through(false, extraBody);
    expect((await runBatch(registry, batch(false), chat.policy)).failed).toBe(0);
    const chats = chat.gateway.seen.filter((r) => r.path === "/v1/chat/completions");
    expect(chats.length).toBeGreaterThan(0);
    for (const r of chats) expect(r.body).toMatchObject({ include_reasoning: false });
  });
});
