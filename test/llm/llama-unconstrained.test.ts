// Token mode and chat mode against the real llama.cpp build with no grammar: the random-weight
// model samples freely, so answers hold CJK characters and emoji split across tokens (llama.cpp
// reports no logprob for a token that ends inside a character) and control tokens. Every
// engine request and answer goes through a logging proxy, and the logs are checked against
// what the engine really said, not against what rollgym reports about itself.
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import { type LlamaServer, startLlamaServer } from "../../scripts/llama/server.ts";
import { requestSeed } from "../../src/llm/policy.ts";
import { loadQwen3Tokenizer, QWEN3_IM_END_ID } from "../../src/mock-engine/qwen3-tokenizer.ts";
import type { MockTokenizer } from "../../src/mock-engine/tokenizer.ts";
import type { BatchRequest } from "../../src/rollout/batch.ts";
import { systemPrompt } from "../../src/rollout/prompt.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";
import { engineProxy } from "../helpers/engine-proxy.ts";
import { FIXTURES } from "../helpers/fixtures.ts";
import { playAgainst } from "../helpers/play.ts";

const registry = createRegistry();

function batch(tokens: boolean): BatchRequest {
  const base = defaultBatchRequest("train", { tags: [{ tag: "CoordSokoban", groups: 2 }], groupSize: 3 });
  return {
    ...base,
    tokens,
    episode: { ...base.episode, max_turn: 3 },
    sampling: { ...base.sampling, temperature: 1, max_tokens: 120 },
  };
}

describe("llama.cpp without a grammar (free multi-byte output)", () => {
  let server: LlamaServer;
  let tokenizer: MockTokenizer;
  beforeAll(async () => {
    server = await startLlamaServer({ ctx: 8192, parallel: 2, threads: 1 });
    tokenizer = await loadQwen3Tokenizer();
  }, 120_000);
  afterAll(async () => {
    await server?.stop();
  });

  it("token mode: every turn's prompt, ids, reported logprobs and mask are the engine's, checked at the proxy", async () => {
    const proxy = await engineProxy(server.baseUrl);
    try {
      const result = await playAgainst(
        { baseURL: `${proxy.url}/v1`, model: server.model, concurrency: 2 },
        batch(true),
      );
      expect(result.failed).toBe(0);
      const completions = proxy.log.filter((x) => x.path === "/completion");
      let turns = 0;
      let missing = 0;
      let multiByte = 0;
      for (const e of result.episodes) {
        const t = e.tokens!;
        expect(e.turns).toHaveLength(3);
        for (const [k, turn] of e.turns.entries()) {
          turns++;
          const start = t.turn_starts[k];
          const end = t.turn_ends[k];
          // The request of this turn is the one whose prompt is the log up to the turn (with the
          // episode's per-request seed: a group's episodes share their first prompt).
          const prompt = JSON.stringify(t.ids.slice(0, start));
          const seed = requestSeed(result.seed, e.env_id, k);
          const sent = completions.filter(
            (x) => JSON.stringify(x.request.prompt) === prompt && x.request.seed === seed,
          );
          expect(sent).toHaveLength(1);
          const answer = sent[0].answer as {
            tokens: number[];
            completion_probabilities: { id: number; prob: number }[];
          };
          // The sampled span is exactly the engine's tokens, masked 1; inserted ids around it are 0.
          expect(t.ids.slice(start, end)).toEqual(answer.tokens);
          expect(t.loss_mask.slice(start, end).every((m) => m === 1)).toBe(true);
          if (k > 0) expect(t.loss_mask.slice(t.turn_ends[k - 1], start).every((m) => m === 0)).toBe(true);
          // Every reported logprob is in the log at its token; the rest are NaN, never invented.
          const logged = t.logprobs.slice(start, end);
          let at = 0;
          for (const entry of answer.completion_probabilities) {
            while (answer.tokens[at] !== entry.id) {
              expect(logged[at]).toBeNaN();
              at++;
            }
            expect(Math.fround(logged[at])).toBe(Math.fround(Math.log(entry.prob)));
            at++;
          }
          missing += answer.tokens.length - answer.completion_probabilities.length;
          // The sampled ids decode to the raw response (the prefill came from the prompt).
          const text = tokenizer.decode(answer.tokens, { skipSpecialTokens: true });
          expect(`<think>${text}`).toBe(turn.raw_response);
          if (/[^ -~\s]/.test(text)) multiByte++;
        }
        expect(t.loss_mask.slice(0, t.prompt_length).every((m) => m === 0)).toBe(true);
        expect(t.logprobs.filter(Number.isNaN)).toHaveLength(t.logprobs_missing);
      }
      expect(turns).toBe(18);
      expect(completions).toHaveLength(18);
      // The harsh case really happened: multi-byte text and tokens llama.cpp gave no logprob for.
      expect(multiByte).toBeGreaterThan(0);
      expect(missing).toBeGreaterThan(0);
      expect(result.metrics["rollgym/logprobs_missing"]).toBe(missing);
    } finally {
      await proxy.close();
    }
  }, 600_000);

  it("chat mode: every episode plays its three turns on free output", async () => {
    const result = await playAgainst(
      { baseURL: `${server.baseUrl}/v1`, model: server.model, concurrency: 2 },
      batch(false),
    );
    expect(result.failed).toBe(0);
    for (const e of result.episodes) expect(e.turns).toHaveLength(3);
    expect(result.episodes.some((e) => e.turns.some((t) => /[^ -~\s]/.test(t.raw_response)))).toBe(true);
  }, 600_000);

  it("token mode on a template that moves the system prompt to the last user turn: only the chat's own text, drift recorded", async () => {
    const moving = await startLlamaServer({
      ctx: 8192,
      parallel: 2,
      threads: 1,
      extraArgs: ["--chat-template-file", join(FIXTURES, "templates", "moves-system-prompt.jinja")],
    });
    try {
      const result = await playAgainst(
        { baseURL: `${moving.baseUrl}/v1`, model: moving.model, concurrency: 2 },
        { ...batch(true), groupSize: 2, tags: [{ tag: "CoordSokoban", groups: 1 }] },
      );
      expect(result.failed).toBe(0);
      const system = systemPrompt(registry.tag("CoordSokoban"), { think: true });
      for (const e of result.episodes) {
        const t = e.tokens!;
        expect(e.turns.length).toBeGreaterThan(1);
        for (let k = 1; k < e.turns.length; k++) {
          // Between two turns: the template's closing, then the user turn exactly as the template
          // renders the last one, the real system prompt in it and no probe text.
          const block = tokenizer.decode(t.ids.slice(t.turn_ends[k - 1], t.turn_starts[k]));
          expect(block.startsWith(`<|im_end|>\n<|im_start|>user\n${system}\n\n`)).toBe(true);
          expect(block).toContain(`Turn ${k + 1}:\nState:\n`);
          expect(block.endsWith("<|im_start|>assistant\n<think>")).toBe(true);
          expect(block.split("<|im_start|>user")).toHaveLength(2);
        }
        // The template took the system prompt out of earlier turns: the log cannot be its rendering.
        expect(t.template_drift).toEqual(expect.any(Number));
        // Its probe renders showed what follows an assistant turn depends on the conversation:
        // every continuation rendered the whole conversation, and the record says why.
        expect(t.id_space_continuations ?? 0).toBe(0);
        expect(t.rendered_continuations).toBe(e.turns.length - 1);
        expect(t.continuation_fallback).toMatch(/differently with another history or system prompt/);
      }
    } finally {
      await moving.stop();
    }
  }, 600_000);

  it("token mode on ChatML (append-only): the log decodes to the template's rendering of the chat", async () => {
    const chatml = await startLlamaServer({
      ctx: 8192,
      parallel: 2,
      threads: 1,
      extraArgs: ["--chat-template", "chatml"],
    });
    try {
      const result = await playAgainst(
        { baseURL: `${chatml.baseUrl}/v1`, model: chatml.model, concurrency: 2 },
        { ...batch(true), groupSize: 2, tags: [{ tag: "CoordSokoban", groups: 1 }] },
      );
      expect(result.failed).toBe(0);
      for (const e of result.episodes) {
        const t = e.tokens!;
        const sampled = e.turns.flatMap((_, k) => {
          const ids = t.ids.slice(t.turn_starts[k], t.turn_ends[k]);
          return ids.at(-1) === QWEN3_IM_END_ID ? ids.slice(0, -1) : ids;
        });
        // Drift only where chat inference cannot show what was sampled: a control token the
        // engine leaves out of the text, or an end token other than <|im_end|>.
        const hidden = tokenizer.decode(sampled) !== tokenizer.decode(sampled, { skipSpecialTokens: true });
        if (hidden) expect(t.template_drift).toEqual(expect.any(Number));
        else expect(t.template_drift).toBeNull();
      }
    } finally {
      await chatml.stop();
    }
  }, 600_000);
});
