// Id-space continuations (issue #32): once a replica's full renders agree with the block the
// template writes after an assistant turn, each continuation is one /tokenize of that block,
// and the logs are those of the full render, checked against a policy that always renders the
// whole conversation. Counted from the engine's side: requests per turn on the mock vLLM engine.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import { ChatPolicy } from "../../src/llm/openai-chat.ts";
import type { ChatTemplateName } from "../../src/mock-engine/chat-template.ts";
import { type MockEngine, startMockEngine } from "../../src/mock-engine/server.ts";
import { readEpisodeFile, writeEpisodeFile } from "../../src/record/episode-file.ts";
import type { BatchResult, EpisodeRecord } from "../../src/record/episode-record.ts";
import { type BatchRequest, runBatch } from "../../src/rollout/batch.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";

const registry = createRegistry();

function tokenBatch(groups: number, seed: number, maxTurn = 5): BatchRequest {
  const base = defaultBatchRequest("train", { tags: [{ tag: "SimpleSokoban", groups }], groupSize: 4 });
  return {
    ...base,
    seed,
    tokens: true,
    episode: { ...base.episode, max_turn: maxTurn },
    sampling: { ...base.sampling, max_tokens: 64 },
  };
}

const turnsOf = (batch: BatchResult) => batch.episodes.reduce((n, e) => n + e.turns.length, 0);
const sum = (batch: BatchResult, field: (e: EpisodeRecord) => number | undefined) =>
  batch.episodes.reduce((n, e) => n + (field(e) ?? 0), 0);

/** A policy on `engine`; `whole` renders every continuation from the whole conversation (today's path before #32). */
async function policyOn(engine: MockEngine, whole = false): Promise<ChatPolicy> {
  const policy = new ChatPolicy({ baseURL: engine.url, model: "mock", concurrency: 16, backoffMs: 1 });
  await policy.preflight();
  if (whole) policy.tokenEngine()!.fallback = "the test renders every continuation whole";
  return policy;
}

/** Group seeds of `batch` whose first prompt no earlier batch rendered: a group's members share one render. */
function newFirstPrompts(batch: BatchResult, earlier: BatchResult): number {
  const rendered = new Set(earlier.episodes.map((e) => e.seed));
  return new Set(batch.episodes.map((e) => e.seed).filter((seed) => !rendered.has(seed))).size;
}

/**
 * Engine requests a batch costs on vLLM's dialect: `firstPrompts` renders, samples,
 * continuations (3 when rendered), drift checks (3).
 */
function expectedRequests(batch: BatchResult, firstPrompts: number): number {
  const checked = batch.episodes.filter((e) => !e.tokens!.template_skipped).length;
  return (
    firstPrompts +
    turnsOf(batch) +
    sum(batch, (e) => e.tokens!.id_space_continuations) +
    3 * sum(batch, (e) => e.tokens!.rendered_continuations) +
    3 * checked
  );
}

describe.each<ChatTemplateName>(["chatml", "qwen3"])(
  "id-space continuations, mock vLLM, %s template",
  (template) => {
    let engine: MockEngine;
    beforeAll(async () => {
      engine = await startMockEngine({ model: "mock", seed: 4, tokenizer: "qwen3", chatTemplate: template });
    });
    afterAll(async () => {
      await engine?.close();
    });

    it("once verified: at most one /tokenize per continuation, logs equal to the full render's", async () => {
      const policy = await policyOn(engine);
      const tokens = policy.tokenEngine()!;
      const warm = await runBatch(registry, tokenBatch(4, 1), policy);
      expect(warm.failed).toBe(0);
      // The first continuation at each depth was rendered whole, to verify the block.
      expect(sum(warm, (e) => e.tokens!.rendered_continuations)).toBe(tokens.verifications);
      expect(tokens.verifications).toBeGreaterThan(0);

      const before = engine.stats().requests;
      const spots = tokens.spotChecks;
      const hits = tokens.blockHits;
      const batch = await runBatch(registry, tokenBatch(8, 2), policy);
      const requests = engine.stats().requests - before;
      await policy.close();
      expect(batch.failed).toBe(0);
      expect(tokens.fallback).toBeNull();
      expect(tokens.promptDrift).toBe(0);
      const turns = turnsOf(batch);
      const idSpace = sum(batch, (e) => e.tokens!.id_space_continuations);
      expect(idSpace).toBeGreaterThan(100);
      const firstPrompts = newFirstPrompts(batch, warm);
      expect(firstPrompts).toBeLessThan(batch.episodes.length / 4);
      // Members of a group that see the same observation at the same turn share the block's ids:
      // one /tokenize for them all (and the logs below still equal the full render's).
      const kept = tokens.blockHits - hits;
      expect(kept).toBeGreaterThan(0);
      expect(requests).toBe(expectedRequests(batch, firstPrompts) - kept);
      // Every continuation rendered whole here was a spot check (the depths were verified above).
      const spotted = tokens.spotChecks - spots;
      expect(sum(batch, (e) => e.tokens!.rendered_continuations)).toBe(spotted);
      expect(batch.episodes.some((e) => e.tokens!.continuation_fallback !== undefined)).toBe(false);
      if (template === "chatml") {
        // Verified append-only on the warm batch: no drift check, so a sample and a continuation
        // per turn, one render per group's first prompt, less the blocks kept, plus 2 per spot
        // check (one continuation in 64).
        expect(
          batch.episodes.every((e) => e.tokens!.template_skipped && e.tokens!.template_drift === null),
        ).toBe(true);
        expect(requests - 2 * spotted).toBe(2 * turns - batch.episodes.length + firstPrompts - kept);
        expect(requests / turns).toBeLessThanOrEqual(2 + 2 / 64);
      } else {
        // Qwen3 rewrites earlier <think> blocks: the drift check stays, and reports it.
        expect(batch.episodes.some((e) => e.tokens!.template_skipped)).toBe(false);
        const multi = batch.episodes.filter((e) => e.turns.length > 1);
        for (const e of multi) expect(e.tokens!.template_drift).toEqual(expect.any(Number));
      }

      // The same batch with every continuation rendered from the whole conversation: the same logs.
      const whole = await policyOn(engine, true);
      const reference = await runBatch(registry, tokenBatch(8, 2), whole);
      await whole.close();
      expect(sum(reference, (e) => e.tokens!.id_space_continuations)).toBe(0);
      expect(batch.episodes.map((e) => e.tokens!.ids)).toEqual(reference.episodes.map((e) => e.tokens!.ids));
      expect(batch.episodes.map((e) => e.tokens!.loss_mask)).toEqual(
        reference.episodes.map((e) => e.tokens!.loss_mask),
      );
    });
  },
);

describe("a template that rewrites what follows an assistant turn", () => {
  it("is caught by a replica's verification: every later continuation is rendered whole, and the episode file says why", async () => {
    const engine = await startMockEngine({
      model: "mock",
      seed: 4,
      tokenizer: "qwen3",
      chatTemplate: "recap",
    });
    try {
      const policy = await policyOn(engine);
      const tokens = policy.tokenEngine()!;
      const batch = await runBatch(registry, tokenBatch(4, 1), policy);
      const after = await runBatch(registry, tokenBatch(4, 2), policy);
      await policy.close();
      expect(batch.failed + after.failed).toBe(0);
      // The probes' conversations are too short to show it; a fourth user message does.
      expect(tokens.fallback).toMatch(/rewrites what follows an assistant turn: a 8-message conversation/);
      for (const e of after.episodes) {
        expect(e.tokens!.id_space_continuations).toBe(0);
        if (e.turns.length > 1) expect(e.tokens!.continuation_fallback).toBe(tokens.fallback);
      }
      // Exact all along: the same logs as a policy that renders every continuation whole.
      const whole = await policyOn(engine, true);
      const reference = await runBatch(registry, tokenBatch(4, 1), whole);
      await whole.close();
      expect(batch.episodes.map((e) => e.tokens!.ids)).toEqual(reference.episodes.map((e) => e.tokens!.ids));

      // The episode file carries the fallback, and reads back.
      const path = join(mkdtempSync(join(tmpdir(), "rollgym-idspace-")), "episodes.jsonl");
      await writeEpisodeFile(
        path,
        { mode: "train", seed: 2, group_size: 4, tags: [], policy: "mock", settings: {} },
        after,
      );
      const file = await readEpisodeFile(path);
      const named = file.episodes.filter((e) => e.tokens?.continuation_fallback);
      expect(named.length).toBeGreaterThan(0);
      expect(named[0].tokens!.continuation_fallback).toMatch(/renders the whole conversation/);
    } finally {
      await engine.close();
    }
  });
});

describe("a replica that comes back", () => {
  it("is verified again before its continuations go in id space", async () => {
    const engine = await startMockEngine({ model: "mock", seed: 4, tokenizer: "qwen3" });
    try {
      const policy = await policyOn(engine);
      const tokens = policy.tokenEngine()!;
      // Two turns: every continuation is at the same depth, verified once per replica epoch.
      const warm = await runBatch(registry, tokenBatch(2, 1, 2), policy);
      expect(warm.failed).toBe(0);
      expect(tokens.verifications).toBe(1);
      await runBatch(registry, tokenBatch(2, 2, 2), policy);
      expect(tokens.verifications).toBe(1);

      engine.setOutage("503", { retryAfterS: 0 });
      const played = runBatch(registry, tokenBatch(2, 3, 2), policy);
      while (policy.replicas()[0].healthy) await new Promise((resolve) => setTimeout(resolve, 20));
      engine.setOutage(null);
      const batch = await played;
      await policy.close();
      expect(batch.failed).toBe(0);
      expect(policy.replicaEpoch(policy.replicas()[0].url)).toBe(1);
      // One full render verified the block again on the replica's new epoch; the rest waited for it.
      expect(tokens.verifications).toBe(2);
      expect(sum(batch, (e) => e.tokens!.rendered_continuations)).toBe(1);
      expect(sum(batch, (e) => e.tokens!.id_space_continuations)).toBeGreaterThan(0);
      expect(tokens.fallback).toBeNull();
    } finally {
      await engine.close();
    }
  });
});
