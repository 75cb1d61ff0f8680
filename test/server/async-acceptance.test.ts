// Issue #22's acceptance over the real protocol: a simulated trainer on a WebSocket consumes an
// endless token-mode stream from a server playing against the mock engine, and pushes weights
// (begin_update → the mock loads "step-N" → end_update) after every step of groups. Checked:
// no group lost or delivered twice; every sampled id's recorded version equals the version the
// mock engine had loaded when it generated that id (its own record, never shown to rollgym), or
// is its lower bound inside a keep-mode turn that spanned an update (counted); the staleness
// rule on the counts the server reports; the age of every delivered group.
import { afterEach, describe, expect, it } from "vitest";
import { readI32, readU8 } from "../../protocol/codec.ts";
import { ChatPolicy } from "../../src/llm/openai-chat.ts";
import type { PauseMode } from "../../src/llm/versions.ts";
import {
  DEFAULT_MODEL,
  type GenerationRecord,
  type MockEngine,
  startMockEngine,
} from "../../src/mock-engine/server.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { engineVersions } from "../helpers/engine-versions.ts";
import { type Frame, rolloutFrame, TestClient, until } from "../helpers/ws-client.ts";

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  for (const x of open.splice(0).reverse()) await x.close();
});

interface Run {
  pauseRoutes: boolean;
  mode: PauseMode;
  /** Groups per window (= groups_per_step) and episodes per group. */
  perStep: number;
  groupSize: number;
  inFlight: number;
  updates: number;
  maxStaleness: number;
}

async function trainerRun(run: Run) {
  const mock: MockEngine = await startMockEngine({
    tokenizer: "qwen3",
    tpotMs: 1,
    pauseRoutes: run.pauseRoutes,
  });
  open.push(mock);
  const policy = new ChatPolicy({
    baseURL: mock.url,
    model: DEFAULT_MODEL,
    backoffMs: 20,
    concurrency: run.inFlight * run.groupSize,
  });
  await policy.preflight();
  open.push(policy);
  const server: RollgymServer = await buildServer({
    policy,
    groupConcurrency: run.inFlight,
    maxBufferedGroups: 4 * run.inFlight,
    maxEpisodesPerConnection: 65_536,
    maxUnackedGroups: 100_000,
  });
  const url = await server.listen(0, "127.0.0.1");
  open.push({ close: async () => void (await server.shutdown()) });

  const trainer = await TestClient.connect(url, {
    hello: { type: "hello", protocol: 1, client: "trainer", role: "trainer" },
  });
  open.push({ close: async () => trainer.close() });
  // Every group is acknowledged as it arrives (the trainer's buffer is the test's arrays).
  trainer.ws.on("message", () => {
    const f = trainer.received.at(-1)!;
    if (f.type === "group") trainer.send({ type: "ack", rollout: "a", groups: [f.group] });
  });
  trainer.send({ type: "credit", groups: 1_000_000 });
  trainer.send(
    rolloutFrame("a", run.perStep, run.groupSize, {
      delivery: "stream",
      endless: true,
      tokens: true,
      in_flight: run.inFlight,
      max_staleness: run.maxStaleness,
      groups_per_step: run.perStep,
      max_turn: 2,
      sampling: { max_tokens: 24 },
    }),
  );
  const ages: number[] = [];
  let current = 0;
  const receivedAt = new Map<Frame, number>();
  trainer.ws.on("message", () => {
    const f = trainer.received.at(-1)!;
    if (f.type === "group") receivedAt.set(f, current);
  });
  for (let step = 1; step <= run.updates; step++) {
    await until(() => trainer.of("group").length >= step * run.perStep);
    const from = trainer.received.length;
    trainer.send({ type: "begin_update", id: `u${step}`, mode: run.mode });
    await trainer.next((f) => f.type === "update_begun" && trainer.received.indexOf(f) >= from);
    mock.loadWeights(`step-${step}`);
    trainer.send({ type: "end_update", id: `u${step}`, version: { label: `step-${step}`, ordinal: step } });
    await trainer.next((f) => f.type === "update_ended" && trainer.received.indexOf(f) >= from);
    current = step;
  }
  trainer.send({ type: "cancel", rollout: "a" });
  const batch = await trainer.next((f) => f.type === "batch");

  // Each group once, and exactly the groups the windows say were started.
  const groups = new Map<number, Frame>();
  for (const f of trainer.of("group")) {
    expect(groups.has(f.group as number), `group ${f.group} twice`).toBe(false);
    groups.set(f.group as number, f);
  }
  const started: number[] = [];
  const windows = trainer.of("window");
  expect(batch.windows).toBe(windows.length);
  for (const w of windows) {
    const notStarted = new Set((w.not_started as number[] | undefined) ?? []);
    for (const g of [...(w.kept as number[]), ...(w.dropped as number[]), ...(w.failed_groups as number[])])
      if (!notStarted.has(g)) started.push(g);
  }
  expect([...groups.keys()].sort((a, b) => a - b)).toEqual(started.sort((a, b) => a - b));

  // Versions against the engine's own record, per sampled id.
  const records = mock.generations();
  let spanning = 0;
  let continued = 0;
  let checkedIds = 0;
  let peakRunning = 0;
  for (const f of groups.values()) {
    const admitted = f.admitted as Record<string, number>;
    expect(admitted.accepted + admitted.running).toBeLessThanOrEqual(admitted.capacity);
    expect(admitted.capacity).toBe((run.maxStaleness + admitted.version + 1) * run.perStep);
    peakRunning = Math.max(peakRunning, admitted.running);
    if (f.min_version !== undefined) ages.push((receivedAt.get(f) ?? current) - (f.min_version as number));
    const episodes = f.episodes as {
      env_id: number;
      failure: string | null;
      turns: { version?: { dispatch: number; completion: number } }[];
    }[];
    if (f.token_versions_i32 === undefined) continue;
    const offsets = readI32(f.token_offsets_i32 as Uint8Array);
    const ids = readI32(f.token_ids_i32 as Uint8Array);
    const mask = readU8(f.loss_mask_u8 as Uint8Array);
    const versions = readI32(f.token_versions_i32 as Uint8Array);
    const counts = readI32(f.turn_counts_i32 as Uint8Array);
    const starts = readI32(f.turn_starts_i32 as Uint8Array);
    const ends = readI32(f.turn_ends_i32 as Uint8Array);
    let turnIndex = 0;
    episodes.forEach((e, i) => {
      const log = [...ids.subarray(offsets[i], offsets[i + 1])];
      const own = [...versions.subarray(offsets[i], offsets[i + 1])];
      const local = e.env_id % (run.perStep * run.groupSize);
      const turns = Array.from(
        { length: counts[i] },
        (_, k) => [starts[turnIndex + k], ends[turnIndex + k]] as const,
      );
      const mine = episodeRecords(
        records.filter((r) => r.session?.endsWith(`:${local}`)),
        log,
        turns.filter(([from, to]) => to > from),
      );
      for (let k = 0; k < counts[i]; k++, turnIndex++) {
        const [from, to] = [starts[turnIndex], ends[turnIndex]];
        if (from === to || e.failure !== null) continue;
        const ours = own.slice(from, to);
        for (let t = from; t < to; t++) expect(mask[offsets[i] + t]).toBe(1);
        const engine = engineVersions(mine, log, from, to);
        const version = e.turns[k].version!;
        if (version.dispatch !== version.completion && new Set(ours).size === 1 && run.pauseRoutes) {
          // A request the pause did not end ran across the update: its ids carry the dispatch
          // version, a lower bound of the engine's.
          spanning++;
          for (const [j, v] of ours.entries()) expect(v).toBeLessThanOrEqual(engine[j]);
        } else expect(ours).toEqual(engine);
        if (new Set(ours).size > 1) continued++;
        checkedIds += ours.length;
      }
    });
  }
  return { groups: groups.size, windows: windows.length, spanning, continued, checkedIds, ages, peakRunning };
}

describe("asynchronous RL over the protocol (issue #22 acceptance)", () => {
  it("keep mode: 1,024 episodes in flight, 50 updates, nothing lost, every version the engine's", async () => {
    const r = await trainerRun({
      pauseRoutes: true,
      mode: "keep",
      perStep: 16,
      groupSize: 8,
      inFlight: 128,
      updates: 50,
      maxStaleness: 8,
    });
    expect(r.peakRunning * 8).toBeGreaterThanOrEqual(1024);
    expect(r.groups).toBeGreaterThanOrEqual(50 * 16);
    expect(r.checkedIds).toBeGreaterThan(0);
    expect(r.spanning).toBeGreaterThan(0);
    expect(Math.min(...r.ages)).toBeGreaterThanOrEqual(0);
    console.log(JSON.stringify({ mode: "keep", ...r, ages: summary(r.ages) }));
  }, 600_000);

  for (const [name, pauseRoutes, mode] of [
    ["abort mode", true, "abort"],
    ["an engine without /pause (abort and continue)", false, "keep"],
  ] as const) {
    it(`${name}: nothing lost, every version the engine's`, async () => {
      const r = await trainerRun({
        pauseRoutes,
        mode,
        perStep: 8,
        groupSize: 4,
        inFlight: 32,
        updates: 10,
        maxStaleness: 1,
      });
      expect(r.groups).toBeGreaterThanOrEqual(80);
      expect(r.checkedIds).toBeGreaterThan(0);
      console.log(JSON.stringify({ mode: name, ...r, ages: summary(r.ages) }));
    }, 600_000);
  }
});

/**
 * The engine's records of one episode. Its session header is "<batch>:<env id in its window>",
 * and the batch number (one per window) is the server's own: of the sessions of its env id that
 * began from its first prompt, the one whose records account for every turn of its log (puzzles
 * of other windows may share a prompt, not a whole episode's answers).
 */
function episodeRecords(
  records: readonly GenerationRecord[],
  log: readonly number[],
  turns: readonly (readonly [number, number])[],
): GenerationRecord[] {
  if (turns.length === 0) return [];
  const prompt = turns[0][0];
  const sessions = new Set(
    records
      .filter((r) => r.prompt_ids.length === prompt && r.prompt_ids.every((id, j) => id === log[j]))
      .map((r) => r.session),
  );
  for (const session of sessions) {
    const mine = records.filter((r) => r.session === session);
    try {
      for (const [from, to] of turns) engineVersions(mine, log, from, to);
      return mine;
    } catch {
      // another window's episode with the same first prompt
    }
  }
  return [];
}

function summary(ages: number[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const a of ages) counts[a] = (counts[a] ?? 0) + 1;
  return counts;
}
