// logit_bias end to end against the real llama.cpp server: the configured key becomes the
// sampling field rollgym's request bodies carry (samplingFields, the code both the chat and the
// token route send), and it changes which tokens the engine samples. Needs scripts/llama/build.sh.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LlamaServer, startLlamaServer } from "../../scripts/llama/server.ts";
import { loadConfig } from "../../src/config/index.ts";
import { samplingFields } from "../../src/llm/generation.ts";
import { resolveRequest } from "../../src/rollout/request.ts";

let server: LlamaServer;

const post = async (path: string, body: unknown): Promise<Record<string, unknown>> => {
  const response = await fetch(`${server.baseUrl}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  expect(response.status, await response.clone().text()).toBe(200);
  return (await response.json()) as Record<string, unknown>;
};

/** The request body's sampling fields, from a config with these overrides. */
function sampling(overrides: string[]): Record<string, unknown> {
  const { config } = loadConfig({
    overrides: ["actor_rollout_ref.rollout.response_length=24", ...overrides],
  });
  return samplingFields({ ...resolveRequest(config).sampling, seed: 11 }, "llamacpp");
}

/** The ids llama.cpp samples on its token route (/completion) for this configuration. */
async function sampledIds(overrides: string[]): Promise<number[]> {
  const answer = await post("/completion", {
    ...sampling(overrides),
    prompt: "Sokoban is a puzzle game in which",
    return_tokens: true,
  });
  return answer.tokens as number[];
}

const bias = (ids: Iterable<number>, value: number): string =>
  `rollgym.llm.logit_bias={${[...ids].map((id) => `${id}: ${value}`).join(", ")}}`;

describe("logit_bias against llama-server", () => {
  beforeAll(async () => {
    server = await startLlamaServer({ parallel: 1 });
  }, 90_000);
  afterAll(async () => {
    await server?.stop();
  });

  it("is left out of the body when unset, and sent as a token-id map when set", () => {
    expect(sampling([])).not.toHaveProperty("logit_bias");
    expect(sampling([bias([5, 17], -100)]).logit_bias).toEqual({ "5": -100, "17": -100 });
  });

  it("a large negative bias keeps the biased ids out of the sample", async () => {
    const free = await sampledIds([]);
    expect(free).toHaveLength(24);
    const banned = new Set(free);
    const biased = await sampledIds([bias(banned, -100)]);
    expect(biased.length).toBeGreaterThan(0);
    expect(biased.filter((id) => banned.has(id))).toEqual([]);
  }, 120_000);

  it("a large positive bias on one id makes it the only sampled token, on the chat route too", async () => {
    const free = await sampledIds([]);
    // An id the model did not pick on its own, so only the bias can explain it.
    const forced = ((await post("/tokenize", { content: " box" })).tokens as number[])[0];
    expect(free).not.toContain(forced);
    const ids = await sampledIds([bias([forced], 100)]);
    expect(ids).toEqual(new Array(24).fill(forced));

    const piece = (await post("/detokenize", { tokens: [forced] })).content as string;
    const chat = await post("/v1/chat/completions", {
      ...sampling([bias([forced], 100)]),
      model: server.model,
      messages: [{ role: "user", content: "Move the box." }],
    });
    const text = (chat.choices as { message: { content: string; reasoning_content?: string } }[])[0].message;
    // The chat route trims the leading space of the content.
    expect(`${text.reasoning_content ?? ""}${text.content}`).toBe(piece.repeat(24).trimStart());
  }, 120_000);
});
