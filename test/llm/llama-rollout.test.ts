// A rollout against the real llama.cpp server (random-weight Qwen3, real Qwen3 tokenizer and
// chat template), with a grammar that keeps its answers in RAGEN's format. Needs
// scripts/llama/build.sh to have run; without the build the test fails with that message.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import { type LlamaServer, ragenGrammar, startLlamaServer } from "../../scripts/llama/server.ts";
import { ChatPolicy } from "../../src/llm/openai-chat.ts";
import { readEpisodeFile, writeEpisodeFile } from "../../src/record/episode-file.ts";
import { runBatch } from "../../src/rollout/batch.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";

let server: LlamaServer;

describe("rollout against llama-server", () => {
  beforeAll(async () => {
    server = await startLlamaServer();
  }, 90_000);
  afterAll(async () => {
    await server?.stop();
  });

  it("completes; every turn parses into valid actions; the episode file holds every turn", async () => {
    const policy = new ChatPolicy({
      baseURL: `${server.baseUrl}/v1`,
      model: server.model,
      concurrency: 4,
      timeoutMs: 120_000,
      // llama.cpp renders an assistant prefill through the Qwen3 template (which adds an empty
      // think block) and echoes it, so it is driven without one and a grammar for the whole answer.
      prefill: "none",
      extraBody: { grammar: ragenGrammar("full") },
    });
    await policy.preflight();
    const base = defaultBatchRequest("train", { tags: [{ tag: "SimpleSokoban", groups: 2 }], groupSize: 2 });
    const request = {
      ...base,
      episode: { ...base.episode, max_turn: 3 },
      sampling: { ...base.sampling, max_tokens: 48 },
    };

    const batch = await runBatch(createRegistry(), request, policy);
    expect(batch.failed).toBe(0);
    expect(batch.episodes).toHaveLength(4);
    let turns = 0;
    for (const e of batch.episodes) {
      expect(e.turns.length === 3 || e.terminated).toBe(true);
      for (const t of e.turns) {
        turns++;
        expect(t.raw_response).toMatch(
          /^<think>[^<]*<\/think><answer>(Up|Down|Left|Right)( \|\| (Up|Down|Left|Right))?<\/answer>$/,
        );
        expect(t.format_penalty).toBe(false);
        expect(t.parsed.length).toBeGreaterThan(0);
        expect(t.actions.length).toBeGreaterThan(0);
        expect(t.completion_tokens).toBeGreaterThan(0);
      }
    }

    const path = join(mkdtempSync(join(tmpdir(), "rollgym-llama-")), "episodes.jsonl");
    await writeEpisodeFile(
      path,
      {
        mode: "train",
        seed: 10000,
        group_size: 2,
        tags: [...request.tags],
        policy: policy.name,
        settings: {},
      },
      batch,
    );
    const file = await readEpisodeFile(path);
    expect(file.episodes).toHaveLength(4);
    expect(file.episodes.reduce((n, e) => n + e.turns.length, 0)).toBe(turns);
    expect(file.episodes.map((e) => e.turns.map((t) => t.raw_response))).toEqual(
      batch.episodes.map((e) => e.turns.map((t) => t.raw_response)),
    );
  }, 300_000);
});
