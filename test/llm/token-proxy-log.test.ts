// Token logs checked from a logging proxy between rollgym and the engine: every turn of every
// episode must be one generation request whose prompt was exactly the log before that turn,
// and the ids and logprobs the log keeps for the turn must be exactly what that request's
// answer carried. The proxy sees the wire, so nothing rollgym parses or reorders can hide.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import { ChatPolicy } from "../../src/llm/openai-chat.ts";
import { requestSeed } from "../../src/llm/policy.ts";
import type { ChatTemplateName } from "../../src/mock-engine/chat-template.ts";
import { type MockEngine, startMockEngine } from "../../src/mock-engine/server.ts";
import type { BatchResult } from "../../src/record/episode-record.ts";
import { type BatchRequest, runBatch } from "../../src/rollout/batch.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";
import { type Exchange, type Gateway, startGateway } from "../helpers/gateway.ts";

const registry = createRegistry();

interface Sampled {
  seed: number;
  ids: number[];
  logprobs: number[];
}

/** The generation requests the proxy saw, by prompt: their seed and the ids and logprobs answered. */
function generations(seen: readonly Exchange[]): Map<string, Sampled[]> {
  const byPrompt = new Map<string, Sampled[]>();
  for (const { path, body, answer } of seen) {
    if (!path.endsWith("/v1/completions")) continue;
    expect(answer?.status).toBe(200);
    const request = body as { prompt: number[]; seed: number; stream?: boolean };
    expect(request.stream ?? false).toBe(false);
    const choice = (
      JSON.parse(answer!.text) as {
        choices: { token_ids: number[]; logprobs: { token_logprobs: number[] } }[];
      }
    ).choices[0];
    const key = request.prompt.join(",");
    const list = byPrompt.get(key) ?? [];
    list.push({ seed: request.seed, ids: choice.token_ids, logprobs: choice.logprobs.token_logprobs });
    byPrompt.set(key, list);
  }
  return byPrompt;
}

/** Every turn of every episode is one request the proxy saw, prompt and answer exactly in the log. */
function checkFromTheWire(batch: BatchResult, request: BatchRequest, seen: readonly Exchange[]): number {
  const byPrompt = generations(seen);
  let turns = 0;
  for (const e of batch.episodes) {
    const t = e.tokens!;
    t.turn_starts.forEach((start, k) => {
      const prompt = t.ids.slice(0, start).join(",");
      const seed = requestSeed(request.seed, e.env_id, k);
      const matches = (byPrompt.get(prompt) ?? []).filter((s) => s.seed === seed);
      expect(
        matches,
        `episode ${e.env_id} turn ${k + 1}: one request with exactly the log as prompt`,
      ).toHaveLength(1);
      const [sent] = matches;
      expect(t.ids.slice(start, t.turn_ends[k])).toEqual(sent.ids);
      expect(t.logprobs.slice(start, t.turn_ends[k])).toEqual(sent.logprobs);
      turns++;
    });
  }
  return turns;
}

describe.each<ChatTemplateName>(["chatml", "qwen3"])(
  "token logs seen through a logging proxy (%s template)",
  (template) => {
    let engine: MockEngine;
    let gateway: Gateway;
    beforeAll(async () => {
      engine = await startMockEngine({ model: "mock", seed: 9, tokenizer: "qwen3", chatTemplate: template });
      gateway = await startGateway(engine.url);
    });
    afterAll(async () => {
      await gateway?.close();
      await engine?.close();
    });

    it("every turn's prompt is the log before it, and its ids and logprobs are the engine's answer", async () => {
      const base = defaultBatchRequest("train", {
        tags: [{ tag: "SimpleSokoban", groups: 3 }],
        groupSize: 4,
      });
      const request: BatchRequest = {
        ...base,
        tokens: true,
        episode: { ...base.episode, max_turn: 4 },
        sampling: { ...base.sampling, max_tokens: 48 },
      };
      const policy = new ChatPolicy({ baseURL: gateway.url, model: "mock", concurrency: 8 });
      await policy.preflight();
      const batch = await runBatch(registry, request, policy);
      await policy.close();
      expect(batch.failed).toBe(0);
      const turns = checkFromTheWire(batch, request, gateway.seen);
      // Multi-turn episodes, or the continuations were never exercised.
      expect(batch.episodes.some((e) => e.turns.length > 1)).toBe(true);
      expect(turns).toBe(batch.episodes.reduce((n, e) => n + e.turns.length, 0));
    });
  },
);
