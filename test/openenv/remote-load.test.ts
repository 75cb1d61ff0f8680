// Remote envs under load (issue 31, items 1 and 2): 64 episodes of 5 steps on a healthy server
// that holds 4 sessions and takes 0.1 s a step wait in rollgym's own queue for most of the
// run, and that wait never counts against capacity_wait_s (here far shorter than the queue);
// declared with more sessions than the server holds, rollgym learns the server's limit from
// its CAPACITY_REACHED instead of paying a refused connect per episode. A server that ignores
// the seed behind a fixed first observation is caught by the seed check's steps.
import { afterEach, describe, expect, it } from "vitest";
import { randomPolicy } from "../../src/llm/builtin.ts";
import { openenvPool } from "../../src/remote-envs/openenv-remote.ts";
import { runBatch } from "../../src/rollout/batch.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";
import { FakeOpenEnv, remoteRegistry } from "../helpers/openenv-remote.ts";
import { until } from "../helpers/ws-client.ts";

const stops: (() => unknown)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0)) await stop();
});

const WALK = { max_actions_per_traj: 5, env_instruction: "Walk.\n" };

/** 64 episodes (16 groups of 4) on a server holding 4 sessions, each step 0.1 s. */
async function sixtyFour(maxSessions: number) {
  const server = await FakeOpenEnv.start({ kind: "capacity", sessions: 4 }, 100);
  stops.push(() => server.stop());
  const registry = await remoteRegistry(
    "Slow",
    "CoordSokoban",
    { url: server.base, max_sessions: maxSessions, capacity_wait_s: 1 },
    WALK,
  );
  const pool = () => openenvPool(registry.tag("Slow").config)!;
  let ceiling = maxSessions;
  const result = await runBatch(
    registry,
    defaultBatchRequest("val", { tags: [{ tag: "Slow", groups: 16 }], groupSize: 4, seed: 11 }),
    randomPolicy(),
    { onTurn: () => (ceiling = Math.min(ceiling, pool().servers[0].ceiling)) },
  );
  return { server, result, ceiling, pool: pool() };
}

describe("remote envs under load", { timeout: 60_000 }, () => {
  it("64 episodes queued behind 4 sessions of a slow, healthy server: none fails, whatever capacity_wait_s", async () => {
    const { server, result, pool } = await sixtyFour(4);
    expect(result.failed).toBe(0);
    expect(result.episodes).toHaveLength(64);
    for (const e of result.episodes) expect(e.failure).toBeNull();
    expect(server.most).toBe(4);
    expect(server.refused).toBe(0);
    expect(pool.counts).toMatchObject({ open: 0, waiting: 0 });
  });

  it("max_sessions over-declared (16 for a server of 4): the limit is learned from CAPACITY_REACHED, one wave of refusals, no failure", async () => {
    const { server, result, ceiling, pool } = await sixtyFour(16);
    expect(result.failed).toBe(0);
    expect(result.episodes).toHaveLength(64);
    expect(server.most).toBe(4);
    // The first wave tries 16 and 12 are refused; after that rollgym keeps to the 4 the server
    // reported (a refused connect per episode would be 60 or more).
    expect(server.refused).toBeGreaterThanOrEqual(12);
    expect(server.refused).toBeLessThanOrEqual(16);
    expect(ceiling).toBe(4);
    // Once the tag's sessions have all closed, the next batch starts from the declared limit again.
    await until(() => pool.servers[0].closing === 0);
    expect(pool.servers[0]).toMatchObject({ limit: 16, ceiling: 16, open: 0 });
  });
});

describe("the seed check steps", () => {
  /** 2 groups of 4 on a server whose first observation is fixed and whose resets ignore the seed. */
  async function hiddenSeed(envConfig: Record<string, unknown> = {}) {
    const server = await FakeOpenEnv.start({ kind: "hidden_seed" });
    stops.push(() => server.stop());
    const registry = await remoteRegistry("Hidden", "CoordSokoban", { url: server.base, ...envConfig }, WALK);
    return runBatch(
      registry,
      defaultBatchRequest("val", { tags: [{ tag: "Hidden", groups: 2 }], groupSize: 4, seed: 21 }),
      randomPolicy(),
    );
  }

  it("a server that ignores the seed behind a fixed first observation is refused at reset, naming the check", async () => {
    const result = await hiddenSeed();
    expect(result.failed).toBe(8);
    for (const e of result.episodes) {
      expect(e.failure).toMatch(
        /^reset: openenv_seed_ignored: the seed check \(check_seed\) failed: two plays of ws:\/\/127\.0\.0\.1:\d+\/ws with seed 2[12] \(reset, then "Go", "Stay"\) gave different observations after step 1 \("Go"\): the env ignores the seed/,
      );
      expect(e.turns).toHaveLength(0);
    }
  });

  it("check_seed: false plays it anyway, with a warning naming the server and the risk", async () => {
    const warnings: Error[] = [];
    const listen = (warning: Error) => warnings.push(warning);
    process.on("warning", listen);
    try {
      const result = await hiddenSeed({ check_seed: false });
      expect(result.failed).toBe(0);
      await until(() => warnings.length > 0);
    } finally {
      process.off("warning", listen);
    }
    const warned = warnings.filter((w) => (w as { code?: string }).code === "ROLLGYM_SEED_UNCHECKED");
    expect(warned).toHaveLength(1);
    expect(warned[0].message).toMatch(
      /^the openenv env at http:\/\/127\.0\.0\.1:\d+ plays without its seed check \(check_seed: false\): if it ignores the seed, a group's episodes each play a different episode/,
    );
  });

  it("seed_check_actions must be a list of action texts", async () => {
    await expect(
      remoteRegistry("Bad", "CoordSokoban", { url: "http://127.0.0.1:1", seed_check_actions: "Go" }),
    ).rejects.toThrow(/seed_check_actions.*"Go" is not a list of 1 to 16 action texts/);
  });
});
