// llama.cpp with and without its server-side reasoning parser: one slot, the same seeds and
// grammar, so the model writes the same text; rollgym's raw_response must be identical.
import { describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import { ragenGrammar, startLlamaServer } from "../../scripts/llama/server.ts";
import { ChatPolicy } from "../../src/llm/openai-chat.ts";
import { runBatch } from "../../src/rollout/batch.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";

async function rawResponses(
  reasoningFormat: "none" | "deepseek",
): Promise<{ raw: string[][]; split: number; reasoningField: unknown }> {
  // The helper starts with --reasoning-format none; a later flag wins.
  const server = await startLlamaServer({
    parallel: 1,
    ctx: 4096,
    threads: 2,
    extraArgs: ["--reasoning-format", reasoningFormat],
  });
  try {
    const policy = new ChatPolicy({
      baseURL: `${server.baseUrl}/v1`,
      model: server.model,
      concurrency: 1,
      prefill: "none",
      grammar: ragenGrammar("full"),
    });
    await policy.preflight();
    // Evidence that the server really splits (or not): one request, as the policy sends it.
    const probe = (await (
      await fetch(`${server.baseUrl}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          messages: [{ role: "user", content: "Go" }],
          grammar: ragenGrammar("full"),
          max_tokens: 48,
          seed: 1,
        }),
      })
    ).json()) as { choices: { message: Record<string, unknown> }[] };
    const base = defaultBatchRequest("train", { tags: [{ tag: "SimpleSokoban", groups: 2 }], groupSize: 2 });
    const request = {
      ...base,
      episode: { ...base.episode, max_turn: 3 },
      sampling: { ...base.sampling, max_tokens: 48 },
    };
    const batch = await runBatch(createRegistry(), request, policy);
    await policy.close();
    expect(batch.failed).toBe(0);
    return {
      raw: batch.episodes.map((e) => e.turns.map((t) => t.raw_response)),
      split: batch.episodes.reduce((n, e) => n + e.turns.filter((t) => t.ambiguous_split).length, 0),
      reasoningField: probe.choices[0].message.reasoning_content,
    };
  } finally {
    await server.stop();
  }
}

describe("llama.cpp reasoning parser", () => {
  it("on or off, rollgym records the same raw_response text", async () => {
    const off = await rawResponses("none");
    const on = await rawResponses("deepseek");
    expect(off.raw.flat().length).toBeGreaterThan(4);
    for (const text of off.raw.flat()) expect(text).toMatch(/^<think>[^<]*<\/think><answer>.*<\/answer>$/);
    expect(off.reasoningField).toBeUndefined();
    expect(on.reasoningField).toEqual(expect.any(String));
    expect(on.raw).toEqual(off.raw);
    expect(on.split).toBe(0);
  }, 300_000);
});
