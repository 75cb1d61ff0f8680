// Version stamps in the records (issue #22): a batch played while a simulated trainer updates
// the weights again and again records each turn's versions and, in token mode, each sampled
// id's, checked against the mock engine's own record of which loaded weights made each token.
// Without a trainer nothing changes in the records.
import { setTimeout as sleep } from "node:timers/promises";
import { afterEach, describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import { oraclePolicy } from "../../src/llm/builtin.ts";
import { ChatPolicy } from "../../src/llm/openai-chat.ts";
import type { Policy } from "../../src/llm/policy.ts";
import type { PauseMode, WeightUpdates } from "../../src/llm/versions.ts";
import { DEFAULT_MODEL, type MockEngine, startMockEngine } from "../../src/mock-engine/server.ts";
import type { BatchResult, EpisodeRecord } from "../../src/record/episode-record.ts";
import { type BatchRequest, runBatch } from "../../src/rollout/batch.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";
import { NOT_SAMPLED } from "../../src/rollout/token-log.ts";
import { engineVersions } from "../helpers/engine-versions.ts";

const registry = createRegistry();
const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((x) => x.close()));
});

function batch(groups: number, groupSize: number, tokens: boolean): BatchRequest {
  const base = defaultBatchRequest("train", { tags: [{ tag: "SimpleSokoban", groups }], groupSize });
  return {
    ...base,
    tokens,
    episode: { ...base.episode, max_turn: 4 },
    sampling: { ...base.sampling, max_tokens: 120 },
  };
}

/** Plays `request` while a trainer updates `updates` (and loads the weights on `engines`) every `everyMs`, until it ends. */
async function playWithUpdates(
  request: BatchRequest,
  policy: Policy,
  engines: readonly MockEngine[],
  mode: PauseMode,
  everyMs: number,
): Promise<{ result: BatchResult; updates: number }> {
  const updates = policy.updates?.() as WeightUpdates;
  let done = false;
  const played = runBatch(registry, request, policy).finally(() => {
    done = true;
  });
  let count = 0;
  while (!done) {
    await sleep(everyMs);
    if (done) break;
    await updates.begin(mode);
    count++;
    for (const engine of engines) engine.loadWeights(`step-${count}`);
    await updates.end({ label: `step-${count}`, ordinal: count });
  }
  return { result: await played, updates: count };
}

function episodes(result: BatchResult): EpisodeRecord[] {
  expect(result.episodes.length).toBeGreaterThan(0);
  return result.episodes;
}

describe("records without a trainer", () => {
  it("carry no version fields (old outputs unchanged)", async () => {
    const result = await runBatch(registry, batch(2, 2, false), oraclePolicy());
    for (const e of episodes(result)) for (const t of e.turns) expect(t).not.toHaveProperty("version");
  });
});

describe("the built-in policy's updates (no engine)", () => {
  it("hold turns while open and stamp every turn with its versions", async () => {
    const policy = oraclePolicy();
    const updates = policy.updates?.() as WeightUpdates;
    await updates.begin();
    let played = 0;
    const playing = runBatch(registry, batch(4, 2, false), policy, {
      onTurn: () => {
        // A second update in the middle of the batch.
        if (++played === 5) void updates.begin().then(() => updates.end({ label: "step-2", ordinal: 2 }));
      },
    });
    await sleep(50);
    expect(played).toBe(0);
    await updates.end({ label: "step-1", ordinal: 1 });
    const turns = episodes(await playing).flatMap((e) => e.turns);
    for (const t of turns) {
      expect(t.version).toBeDefined();
      // A built-in turn never spans an update: it is held before dispatch, then answered at once.
      expect(t.version?.dispatch).toBe(t.version?.completion);
    }
    expect(new Set(turns.map((t) => t.version?.dispatch))).toEqual(new Set([1, 2]));
  });
});

describe("token mode: each sampled id's version is the engine's", () => {
  for (const [name, pauseRoutes, mode] of [
    ["an engine without /pause (abort and continue): exact everywhere", false, "keep"],
    [
      "vLLM's abort mode: partial answers continued; exact outside spanning turns, a lower bound inside them",
      true,
      "abort",
    ],
    ["vLLM's keep mode: exact outside spanning turns, a lower bound inside them", true, "keep"],
  ] as const) {
    it(name, async () => {
      const mock = await startMockEngine({ tokenizer: "qwen3", tpotMs: 6, pauseRoutes });
      open.push(mock);
      const policy = new ChatPolicy({
        baseURL: mock.url,
        model: DEFAULT_MODEL,
        backoffMs: 20,
        streamForUpdates: true,
      });
      open.push(policy);
      await policy.preflight();
      const { result, updates } = await playWithUpdates(batch(3, 2, true), policy, [mock], mode, 50);
      expect(updates).toBeGreaterThan(1);
      const all = mock.generations();
      let spanning = 0;
      let continued = 0;
      let stamped = 0;
      for (const e of episodes(result)) {
        expect(e.failure).toBeNull();
        // The session header is the episode's affinity key, "<batch>:<env id>".
        const records = all.filter((r) => r.session?.endsWith(`:${e.env_id}`));
        const t = e.tokens!;
        if (t.versions === undefined) {
          // Played entirely before the first update: no fields, and the engine agrees it was all "default".
          for (const turn of e.turns) expect(turn).not.toHaveProperty("version");
          e.turns.forEach((_, k) => {
            const engine = engineVersions(records, t.ids, t.turn_starts[k], t.turn_ends[k]);
            expect(new Set(engine)).toEqual(new Set([0]));
          });
          continue;
        }
        stamped++;
        expect(t.versions).toHaveLength(t.ids.length);
        t.loss_mask.forEach((m, i) => {
          if (m === 0) expect(t.versions![i]).toBe(NOT_SAMPLED);
        });
        e.turns.forEach((turn, k) => {
          const [from, to] = [t.turn_starts[k], t.turn_ends[k]];
          const ours = t.versions!.slice(from, to);
          const engine = engineVersions(records, t.ids, from, to);
          const version = turn.version!;
          expect(ours.every((v) => v >= version.dispatch && v <= version.completion)).toBe(true);
          if (new Set(ours).size > 1) continued++;
          if (version.dispatch !== version.completion && pauseRoutes) {
            // With /pause, a request the pause did not end runs on across an update (keep mode,
            // or one on its way to the engine while more than one update passed): its ids carry
            // its dispatch version, a lower bound. One held through a single abort-mode pause
            // ran wholly after it and is stamped exactly (below). Without /pause every request
            // in flight is closed at each update, so every segment is exact.
            spanning++;
            for (const [i, v] of ours.entries()) expect(v).toBeLessThanOrEqual(engine[i]);
            return;
          }
          expect(ours).toEqual(engine);
        });
      }
      expect(stamped).toBeGreaterThan(0);
      // Updates fell inside turns, so the interesting path was taken at least once.
      expect(mode === "keep" && pauseRoutes ? spanning : continued).toBeGreaterThan(0);
    });
  }
});
