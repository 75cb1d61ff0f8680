// How a turn ends, and what the log and the scored text hold after it: a stop string stays in
// the scored text (chat and token mode) and equals the trained ids; a model that stops on an
// end token other than the template's end-of-turn keeps it, and the log goes on as the
// template would after its own end-of-turn, with nothing added in between.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { logprobsWarning } from "../../src/llm/token-engine.ts";
import {
  loadQwen3Tokenizer,
  QWEN3_ENDOFTEXT_ID,
  QWEN3_IM_END_ID,
} from "../../src/mock-engine/qwen3-tokenizer.ts";
import { type MockEngine, startMockEngine } from "../../src/mock-engine/server.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";
import { rollgym } from "../helpers/cli.ts";
import { engineProxy } from "../helpers/engine-proxy.ts";
import { playAgainst, sokobanBatch } from "../helpers/play.ts";

const twoByTwo = (tokens: boolean) => sokobanBatch(2, 2, 96, tokens);

describe("stop strings and end tokens", () => {
  let engine: MockEngine;
  beforeAll(async () => {
    engine = await startMockEngine({ model: "mock", seed: 5, tokenizer: "qwen3" });
  }, 60_000);
  afterAll(async () => {
    await engine.close();
  });

  it("chat mode: a stop string given in extra_body stays in the raw response", async () => {
    const batch = await playAgainst(
      {
        baseURL: engine.url,
        model: "mock",
        concurrency: 4,
        extraBody: { stop: ["</answer>"] },
      },
      twoByTwo(false),
    );
    expect(batch.failed).toBe(0);
    const turns = batch.episodes.flatMap((e) => e.turns);
    expect(turns.filter((t) => t.raw_response.includes("<answer>")).length).toBeGreaterThan(0);
    for (const t of turns)
      if (t.raw_response.includes("<answer>")) expect(t.raw_response.endsWith("</answer>")).toBe(true);
  });

  it("token mode: on a stop string the scored text is the sampled ids, and no drift is made up", async () => {
    const tokenizer = await loadQwen3Tokenizer();
    const batch = await playAgainst(
      {
        baseURL: engine.url,
        model: "mock",
        concurrency: 4,
        extraBody: { stop: ["</answer>"] },
      },
      twoByTwo(true),
    );
    expect(batch.failed).toBe(0);
    let stoppedOnString = 0;
    for (const e of batch.episodes) {
      const t = e.tokens!;
      for (const [k, turn] of e.turns.entries()) {
        const sampled = t.ids.slice(t.turn_starts[k], t.turn_ends[k]);
        expect(`<think>${tokenizer.decode(sampled, { skipSpecialTokens: true })}`).toBe(turn.raw_response);
        if (sampled.at(-1) !== QWEN3_IM_END_ID && turn.finish_reason === "stop") stoppedOnString++;
      }
      expect(t.template_drift).toBeNull();
    }
    expect(stoppedOnString).toBeGreaterThan(0);
  });

  it("token mode: a turn that ends on <|endoftext|> keeps it, and the log goes on without another end token", async () => {
    const tokenizer = await loadQwen3Tokenizer();
    // The engine ends every answer on <|endoftext|> instead of <|im_end|> (both end Qwen's turns).
    const proxy = await engineProxy(engine.url.replace(/\/v1$/, ""), ({ path, answer }) => {
      if (path !== "/v1/completions") return;
      const ids = (answer.choices as { token_ids: number[] }[])[0].token_ids;
      if (ids.at(-1) === QWEN3_IM_END_ID) ids[ids.length - 1] = QWEN3_ENDOFTEXT_ID;
    });
    try {
      const batch = await playAgainst(
        { baseURL: `${proxy.url}/v1`, model: "mock", concurrency: 4 },
        twoByTwo(true),
      );
      expect(batch.failed).toBe(0);
      let checked = 0;
      for (const e of batch.episodes) {
        const t = e.tokens!;
        for (let k = 1; k < e.turns.length; k++) {
          expect(t.ids[t.turn_ends[k - 1] - 1]).toBe(QWEN3_ENDOFTEXT_ID);
          const between = tokenizer.decode(t.ids.slice(t.turn_ends[k - 1], t.turn_starts[k]));
          expect(between.startsWith("\n<|im_start|>user\n")).toBe(true);
          checked++;
        }
        // Chat inference renders <|im_end|> where the log holds <|endoftext|>: reported as drift.
        if (e.turns.length > 1) expect(t.template_drift).toEqual(expect.any(Number));
      }
      expect(checked).toBeGreaterThan(0);
    } finally {
      await proxy.close();
    }
  });

  it("rollout --tokens against vLLM warns about its logprobs mode and records the source in the file header", async () => {
    const dir = mkdtempSync(join(tmpdir(), "rollgym-logprobs-"));
    try {
      const out = join(dir, "tok.jsonl");
      const result = await rollgym([
        "rollout",
        "--llm",
        engine.url,
        "--model",
        "mock",
        "--tokens",
        "--tag",
        "SimpleSokoban",
        "--groups",
        "1",
        "--group-size",
        "2",
        "actor_rollout_ref.rollout.temperature=0.7",
        "--out",
        out,
      ]);
      expect(result.code, result.stderr).toBe(0);
      expect(result.stderr).toMatch(
        /vLLM logs raw logprobs \(before temperature 0\.7.*--logprobs-mode processed_logprobs/,
      );
      const header = JSON.parse(readFileSync(out, "utf8").split("\n")[0]);
      expect(header.logprobs).toMatch(
        /raw_logprobs .* unless the engine was started with --logprobs-mode processed_logprobs/,
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);

  it("warns when vLLM's logprobs may not be the sampling distribution's, and only then", () => {
    const base = defaultBatchRequest("val", {}).sampling;
    expect(logprobsWarning("vllm", { ...base, temperature: 0.5 })).toMatch(
      /--logprobs-mode processed_logprobs/,
    );
    expect(logprobsWarning("vllm", { ...base, temperature: 1, top_p: 1, top_k: -1, min_p: 0 })).toBeNull();
    expect(logprobsWarning("llamacpp", { ...base, temperature: 0.5 })).toBeNull();
  });
});
