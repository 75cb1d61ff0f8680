// The weight-update fallback on a real llama.cpp server (issue #22's acceptance): llama.cpp has
// no /pause, so an update interrupts a token-mode turn in flight (its stream is closed) and the
// turn goes on afterwards from the prompt plus exactly the ids already sampled. Checked from the
// engine's side: greedy decoding of the same prompt without an update gives the same ids and
// logprobs, so the interrupted turn holds exactly what the engine produced before and after.
// Needs scripts/llama/build.sh (as the other llama tests).
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import { type LlamaServer, startLlamaServer } from "../../scripts/llama/server.ts";
import { ChatPolicy } from "../../src/llm/openai-chat.ts";
import type { TokenEngine } from "../../src/llm/token-engine.ts";
import type { WeightUpdates } from "../../src/llm/versions.ts";
import { runBatch } from "../../src/rollout/batch.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";
import { NOT_SAMPLED } from "../../src/rollout/token-log.ts";

let server: LlamaServer;
let policy: ChatPolicy;
let tokens: TokenEngine;
let updates: WeightUpdates;

const SAMPLING = {
  ...defaultBatchRequest("train", { tags: [{ tag: "SimpleSokoban", groups: 1 }], groupSize: 1 }).sampling,
  temperature: 0,
  max_tokens: 160,
  seed: 3,
};
const MESSAGES = [
  {
    role: "system" as const,
    content: "You are solving Sokoban. Answer with <answer>Up</answer> and the like.",
  },
  { role: "user" as const, content: "Turn 1: the box is left of you. What do you do?" },
];

/** Tokens the one slot has decoded for the request in flight (llama.cpp's GET /slots), or 0. */
async function decoded(): Promise<number> {
  const slots = (await (await fetch(`${server.baseUrl}/slots`)).json()) as {
    is_processing?: boolean;
    next_token?: { n_decoded?: number }[];
  }[];
  const slot = slots[0];
  return slot?.is_processing ? (slot.next_token?.[0]?.n_decoded ?? 0) : 0;
}

describe("llama.cpp (no /pause): a token-mode turn interrupted by an update and continued", () => {
  beforeAll(async () => {
    server = await startLlamaServer({ parallel: 1 });
    // Token requests to an engine without /pause stream from the start, not from the first update.
    policy = new ChatPolicy({
      baseURL: `${server.baseUrl}/v1`,
      model: server.model,
      backoffMs: 20,
      streamForUpdates: true,
    });
    await policy.preflight();
    updates = policy.updates();
    tokens = policy.tokenEngine()!;
  }, 120_000);

  afterAll(async () => {
    await policy?.close();
    await server?.stop();
  });

  it("holds exactly the ids (and logprobs) the engine produces without the interruption", async () => {
    const prompt = await tokens.firstPrompt(MESSAGES, "<think>", "ref");
    const reference = await tokens.generate(prompt, SAMPLING, "ref");
    expect(reference.segments).toBe(1);
    expect(reference.ids.length).toBeGreaterThan(20);

    const turn = tokens.generate(prompt, SAMPLING, "interrupted");
    // Some tokens out, and well before the end.
    for (let i = 0; i < 2000 && (await decoded()) < 8; i++) await sleep(2);
    const begun = await updates.begin("keep");
    expect(begun).toMatchObject({ paused: 0, aborted: 1, out_of_routing: [], in_flight: 1 });
    await updates.end({ label: "step-1", ordinal: 1 });
    const sample = await turn;

    expect(sample.segments).toBe(2);
    expect(policy.stats.failures).toBe(0);
    expect(sample.ids).toEqual(reference.ids);
    expect(sample.logprobs).toEqual(reference.logprobs);
    expect(sample.finishReason).toBe(reference.finishReason);
    // Each segment's version: the ids before the interruption 0, after it 1.
    const kept = sample.versions.indexOf(1);
    expect(kept).toBeGreaterThan(0);
    expect(sample.versions).toEqual(sample.ids.map((_, i) => (i < kept ? 0 : 1)));
    expect(sample.turnVersions).toEqual({ dispatch: 0, completion: 1 });
  }, 120_000);

  it("in a token-mode rollout: the log keeps ids, mask, logprobs and versions aligned across the interruption", async () => {
    const base = defaultBatchRequest("train", { tags: [{ tag: "SimpleSokoban", groups: 1 }], groupSize: 1 });
    const request = {
      ...base,
      tokens: true,
      episode: { ...base.episode, max_turn: 2 },
      sampling: { ...base.sampling, temperature: 0, max_tokens: 96 },
    };
    const before = (tokens as TokenEngine).continued;
    const playing = runBatch(createRegistry(), request, policy);
    for (let i = 0; i < 2000 && (await decoded()) < 8; i++) await sleep(2);
    await updates.begin("keep");
    await updates.end({ label: "step-2", ordinal: 2 });
    const result = await playing;
    expect(tokens.continued).toBe(before + 1);
    const [episode] = result.episodes;
    expect(episode.failure).toBeNull();
    const log = episode.tokens!;
    for (const field of [log.loss_mask, log.logprobs, log.versions!])
      expect(field).toHaveLength(log.ids.length);
    log.loss_mask.forEach((m, i) => {
      if (m === 0) {
        expect(log.versions![i]).toBe(NOT_SAMPLED);
        expect(log.logprobs[i]).toBe(0);
      } else expect([1, 2]).toContain(log.versions![i]);
    });
    // The interrupted turn: its ids from both versions, in order, and its record marks the span.
    const spans = episode.turns.filter((t) => t.version!.dispatch !== t.version!.completion);
    expect(spans).toHaveLength(1);
    const k = episode.turns.indexOf(spans[0]);
    const own = log.versions!.slice(log.turn_starts[k], log.turn_ends[k]);
    expect(own[0]).toBe(1);
    expect(own.at(-1)).toBe(2);
    expect([...own].sort()).toEqual(own);
    expect(spans[0].completion_tokens).toBe(own.length);
  }, 120_000);
});
