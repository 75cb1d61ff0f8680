// Token mode on Llama 3 with its own tokenizer and chat template (the random-weight Llama 3 model
// build.sh writes), sampled freely: the log must decode to the template's rendering of the
// conversation, rendered here with a Jinja engine of our own, not llama.cpp's. Llama 3's
// template trims each message and ends with a BOS the engine adds itself, and its first version
// writes the generation prompt even when not asked: each is a way for a log to go wrong.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Template } from "@huggingface/jinja";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import { type LlamaServer, llamaDir, startLlamaServer } from "../../scripts/llama/server.ts";
import type { ChatMessage } from "../../src/llm/chat.ts";
import { ChatPolicy } from "../../src/llm/openai-chat.ts";
import { requestSeed } from "../../src/llm/policy.ts";
import { type BatchRequest, runBatch } from "../../src/rollout/batch.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";
import { textDrift } from "../../src/rollout/token-log.ts";
import { engineProxy } from "../helpers/engine-proxy.ts";

const BEGIN_OF_TEXT = 128000;
const EOT = 128009;
/** Llama 3's added tokens (128000…128255) are all special: the engine leaves them out of the text. */
const FIRST_SPECIAL = 128000;

function batch(): BatchRequest {
  const base = defaultBatchRequest("train", { tags: [{ tag: "CoordSokoban", groups: 1 }], groupSize: 2 });
  return {
    ...base,
    seed: 11,
    tokens: true,
    episode: { ...base.episode, max_turn: 3 },
    sampling: { ...base.sampling, temperature: 1, max_tokens: 64 },
  };
}

describe("token mode on Llama 3 with its own tokenizer and chat template", () => {
  let server: LlamaServer;
  let template: Template;
  beforeAll(async () => {
    server = await startLlamaServer({ model: "llama3", ctx: 8192, parallel: 2, threads: 1 });
    const config = JSON.parse(
      readFileSync(join(llamaDir(), "tokenizer-llama3", "tokenizer_config.json"), "utf8"),
    ) as { chat_template: string; bos_token: string };
    template = new Template(config.chat_template);
    expect(config.bos_token).toBe("<|begin_of_text|>");
  }, 120_000);
  afterAll(async () => {
    await server?.stop();
  });

  const render = (messages: readonly ChatMessage[]) =>
    template.render({ messages, bos_token: "<|begin_of_text|>", add_generation_prompt: true });

  const detokenize = async (tokens: readonly number[]): Promise<string> => {
    const res = await fetch(`${server.baseUrl}/detokenize`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ tokens }),
    });
    return ((await res.json()) as { content: string }).content;
  };

  it("the log decodes to the template's rendering, except where chat inference cannot show what was sampled", async () => {
    const proxy = await engineProxy(server.baseUrl);
    try {
      const policy = new ChatPolicy({ baseURL: `${proxy.url}/v1`, model: server.model, concurrency: 2 });
      await policy.preflight();
      const result = await runBatch(createRegistry(), batch(), policy);
      const tokens = policy.tokenEngine()!;
      await policy.close();
      expect(result.failed).toBe(0);
      // Id-space continuations ran here (Llama 3 trims contents: only those without edge whitespace).
      expect(tokens.fallback).toBeNull();
      const idSpace = result.episodes.reduce((n, e) => n + (e.tokens!.id_space_continuations ?? 0), 0);
      expect(idSpace).toBeGreaterThan(0);
      expect(result.episodes).toHaveLength(2);
      const completions = proxy.log.filter((x) => x.path === "/completion");
      let exact = 0;
      for (const e of result.episodes) {
        const t = e.tokens!;
        expect(e.turns).toHaveLength(3);
        // One BOS, the model's own, as the chat route puts it before the rendered template.
        expect(t.ids[0]).toBe(BEGIN_OF_TEXT);
        expect(t.ids[1]).not.toBe(BEGIN_OF_TEXT);
        for (let k = 0; k < e.turns.length; k++) {
          // A group's episodes share their first prompt, not their per-request seed.
          const prompt = JSON.stringify(t.ids.slice(0, t.turn_starts[k]));
          const seed = requestSeed(result.seed, e.env_id, k);
          const sent = completions.filter(
            (x) => JSON.stringify(x.request.prompt) === prompt && x.request.seed === seed,
          );
          expect(sent).toHaveLength(1);
          expect(t.ids.slice(t.turn_starts[k], t.turn_ends[k])).toEqual(sent[0].answer.tokens);
        }
        // The conversation rollgym rendered for its own drift check (closed by a user "x"): its
        // assistant turns must be the episode's raw responses.
        const rendered = proxy.log.filter((x) => {
          const messages = x.request.messages as ChatMessage[] | undefined;
          if (x.path !== "/apply-template" || !messages) return false;
          const answers = messages.filter((m) => m.role === "assistant").map((m) => m.content);
          return JSON.stringify(answers) === JSON.stringify(e.turns.map((turn) => turn.raw_response));
        });
        expect(rendered).toHaveLength(1);
        const conversation = (rendered[0].request.messages as ChatMessage[]).slice(0, -1);
        expect(conversation.at(-1)?.role).toBe("assistant");

        const log = await detokenize(t.ids.slice(0, t.turn_ends.at(-1)));
        const drift = textDrift(log, render(conversation));
        // Where chat inference cannot show what was sampled, the log cannot be the rendering: the
        // template trims each message (a reply ending in whitespace), and the engine leaves special
        // tokens out of the text (one sampled inside a reply, or an end token other than <|eot_id|>).
        const hidden = e.turns.some((turn, k) => {
          const ids = t.ids.slice(t.turn_starts[k], t.turn_ends[k]);
          const body = ids.at(-1) === EOT ? ids.slice(0, -1) : ids;
          return body.some((id) => id >= FIRST_SPECIAL) || turn.raw_response !== turn.raw_response.trim();
        });
        expect(t.template_drift).toBe(drift);
        if (hidden) expect(drift).toEqual(expect.any(Number));
        else {
          expect(drift).toBeNull();
          exact++;
        }
      }
      // Both kinds happen with this seed (one episode samples a special token): neither branch is vacuous.
      expect(exact).toBe(1);
    } finally {
      await proxy.close();
    }
  }, 600_000);
});
