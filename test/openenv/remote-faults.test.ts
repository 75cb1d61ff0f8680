// Remote envs that fail (env_type openenv): a server that hangs a step, one that answers
// garbage, one killed mid-rollout, one whose reset ignores the seed, one fuller than declared.
// Each ends the affected episodes with a named reason (no hang: the step timeout is short),
// the other tag's groups finish, every group is reported exactly once, and sessions are given
// back. One case runs through `rollgym serve`'s protocol, counting the group frames a client gets.
import type { ChildProcess } from "node:child_process";
import { afterEach, describe, expect, it } from "vitest";
import type { EnvRegistry } from "../../envs/registry.ts";
import { randomPolicy } from "../../src/llm/builtin.ts";
import type { Policy } from "../../src/llm/policy.ts";
import type { BatchResult } from "../../src/record/episode-record.ts";
import { openenvPool } from "../../src/remote-envs/openenv-remote.ts";
import { runBatch } from "../../src/rollout/batch.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { ROOT } from "../helpers/cli.ts";
import {
  addRemoteTag,
  bisectPolicy,
  type FakeFault,
  FakeOpenEnv,
  remoteRegistry,
  startPythonProvider,
} from "../helpers/openenv-remote.ts";
import { type Frame, TestClient, until } from "../helpers/ws-client.ts";

const stops: (() => unknown)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0)) await stop();
});

const WALK = { max_actions_per_traj: 5, env_instruction: "Walk.\n" };

/** A registry with Good (a well-behaved fake) and Bad (a fake with `fault`), step timeout 0.5 s. */
async function goodAndBad(fault: FakeFault, bad: Record<string, unknown> = {}): Promise<EnvRegistry> {
  const good = await FakeOpenEnv.start({ kind: "none" });
  const faulty = await FakeOpenEnv.start(fault);
  stops.push(
    () => good.stop(),
    () => faulty.stop(),
  );
  const timeouts = { step_timeout_s: 0.5, connect_timeout_s: 2, max_sessions: 16 };
  const registry = await remoteRegistry("Good", "CoordSokoban", { url: good.base, ...timeouts }, WALK);
  addRemoteTag(registry, "Bad", "CoordSokoban", { url: faulty.base, ...timeouts, ...bad }, WALK);
  return registry;
}

/** Plays Good and Bad groups together, counting how often each group is reported. */
async function play(registry: EnvRegistry, policy: Policy = randomPolicy()) {
  const reported = new Map<number, number>();
  const request = defaultBatchRequest("val", {
    tags: [
      { tag: "Good", groups: 3 },
      { tag: "Bad", groups: 3 },
    ],
    groupSize: 4,
    seed: 50,
  });
  const result = await runBatch(registry, request, policy, {
    onGroup: (group) => reported.set(group, (reported.get(group) ?? 0) + 1),
  });
  return { result, reported };
}

/** Good's episodes all finished; each of the six groups was reported once. */
function othersFinished(result: BatchResult, reported: Map<number, number>): void {
  const good = result.episodes.filter((e) => e.tag === "Good");
  expect(good).toHaveLength(12);
  for (const e of good) expect(e.failure).toBeNull();
  expect(good.filter((e) => e.end_reason === "done").length).toBeGreaterThan(0);
  expect([...reported.entries()].sort((a, b) => a[0] - b[0])).toEqual([0, 1, 2, 3, 4, 5].map((g) => [g, 1]));
  expect(result.groups.map((g) => g.failed)).toEqual([false, false, false, true, true, true]);
}

function sessionsGivenBack(registry: EnvRegistry): void {
  for (const tag of ["Good", "Bad"])
    expect(openenvPool(registry.tag(tag).config)?.counts).toMatchObject({ open: 0, waiting: 0 });
}

describe("remote env faults", () => {
  it("a server that hangs a step: the episodes fail with openenv_timeout after step_timeout_s", async () => {
    // The seed check's own steps would meet the hang at reset (the next case): here the
    // episodes' turns meet it.
    const registry = await goodAndBad({ kind: "hang", at: 2 }, { check_seed: false });
    const { result, reported } = await play(registry);
    const bad = result.episodes.filter((e) => e.tag === "Bad");
    for (const e of bad) {
      expect(e.end_reason).toBe("failed");
      expect(e.failure).toMatch(
        /^turn \d+: openenv_timeout: no answer to step from ws:\/\/127\.0\.0\.1:\d+\/ws within 0\.5 s \(step_timeout_s\)$/,
      );
    }
    othersFinished(result, reported);
    sessionsGivenBack(registry);
  });

  it("a server that answers garbage: the episodes fail with openenv_garbage naming what came", async () => {
    const registry = await goodAndBad({ kind: "garbage", at: 1 }, { check_seed: false });
    const { result, reported } = await play(registry);
    for (const e of result.episodes.filter((e) => e.tag === "Bad"))
      expect(e.failure).toMatch(
        /^turn 1: openenv_garbage: ws:\/\/\S+ answered step with text that is not JSON: \}\{ this is not OpenEnv$/,
      );
    othersFinished(result, reported);
    sessionsGivenBack(registry);
  });

  it("a step that hangs in the seed check: the episodes fail at reset, naming the check", async () => {
    const registry = await goodAndBad({ kind: "hang", at: 2 });
    const { result, reported } = await play(registry);
    for (const e of result.episodes.filter((e) => e.tag === "Bad")) {
      expect(e.failure).toMatch(
        /^reset: openenv_timeout: no answer to step from ws:\/\/127\.0\.0\.1:\d+\/ws within 0\.5 s \(step_timeout_s\) \(in the seed check: check_seed\)$/,
      );
      expect(e.turns).toHaveLength(0);
    }
    othersFinished(result, reported);
    sessionsGivenBack(registry);
  });

  it("an env whose reset ignores the seed is detected: every episode fails with openenv_seed_ignored", async () => {
    const registry = await goodAndBad({ kind: "no_seed" });
    const { result, reported } = await play(registry);
    for (const e of result.episodes.filter((e) => e.tag === "Bad")) {
      expect(e.failure).toMatch(
        /^reset: openenv_seed_ignored: the seed check \(check_seed\) failed: two plays of \S+ with seed 5\d \(reset, then "Go", "Stay"\) gave different observations after the reset: the env ignores the seed/,
      );
      expect(e.turns).toHaveLength(0);
    }
    othersFinished(result, reported);
    // check_seed: false plays it anyway (each episode then has its own puzzle).
    const unchecked = await goodAndBad({ kind: "no_seed" }, { check_seed: false });
    expect((await play(unchecked)).result.failed).toBe(0);
  });

  it("a server fuller than declared (CAPACITY_REACHED): episodes wait for a session instead of failing, and use the room it gains later", async () => {
    const fault = { kind: "capacity" as const, sessions: 2 };
    const full = await FakeOpenEnv.start(fault);
    stops.push(() => full.stop());
    const registry = await remoteRegistry("Full", "CoordSokoban", { url: full.base, max_sessions: 8 }, WALK);
    const request = defaultBatchRequest("val", { tags: [{ tag: "Full", groups: 3 }], groupSize: 4, seed: 3 });
    const result = await runBatch(registry, request, randomPolicy());
    expect(result.failed).toBe(0);
    expect(result.episodes).toHaveLength(12);
    expect(full.most).toBe(2);
    // rollgym keeps to what the server holds: past the first wave (8 tried at once, 6 refused),
    // a session that ends frees one slot and probes one more, so at most two refused connects
    // per ended session (the server may not have seen the close yet), not one per waiting
    // episode per retry.
    expect(full.refused).toBeLessThanOrEqual(6 + 2 * 12);

    // Its other clients gone, the server holds 8 again; the limit climbs back as sessions end.
    fault.sessions = 8;
    const again = await runBatch(registry, request, randomPolicy());
    expect(again.failed).toBe(0);
    expect(full.most).toBeGreaterThan(2);
    expect(openenvPool(registry.tag("Full").config)!.servers[0].limit).toBe(8);
  });

  it("a CAPACITY_REACHED that does not clear within capacity_wait_s fails the episode saying so", async () => {
    const full = await FakeOpenEnv.start({ kind: "capacity", sessions: 0 });
    stops.push(() => full.stop());
    const registry = await remoteRegistry(
      "Full",
      "CoordSokoban",
      { url: full.base, capacity_wait_s: 0.3 },
      WALK,
    );
    const result = await runBatch(
      registry,
      defaultBatchRequest("val", { tags: [{ tag: "Full", groups: 1 }], groupSize: 2, seed: 3 }),
      randomPolicy(),
    );
    for (const e of result.episodes)
      expect(e.failure).toMatch(
        /^reset: openenv_capacity: ws:\S+ answered CAPACITY_REACHED: full; waited 0\.3 s \(capacity_wait_s\) for a session$/,
      );
  });

  it("several addresses of one image: a dead one is skipped, the episodes play on the live one", async () => {
    const live = await FakeOpenEnv.start({ kind: "none" });
    const dead = await FakeOpenEnv.start({ kind: "none" });
    const deadBase = dead.base;
    await dead.stop();
    stops.push(() => live.stop());
    const registry = await remoteRegistry(
      "Walk",
      "CoordSokoban",
      { urls: [deadBase, live.base], max_sessions: 4, connect_timeout_s: 5 },
      WALK,
    );
    const pool = () => openenvPool(registry.tag("Walk").config)!;
    let most = 0;
    const result = await runBatch(
      registry,
      defaultBatchRequest("val", { tags: [{ tag: "Walk", groups: 3 }], groupSize: 4, seed: 9 }),
      randomPolicy(),
      { onTurn: () => (most = Math.max(most, pool().servers[1].open)) },
    );
    expect(result.failed).toBe(0);
    expect(most).toBe(4);
    expect(pool().servers[0].open).toBe(0);
    expect(pool().servers.map((s) => s.downUntil > 0)).toEqual([true, false]);
    expect(pool().counts).toMatchObject({ open: 0, waiting: 0 });
  });

  it("a Python env server killed mid-rollout: its episodes fail with a reason, the others finish", {
    timeout: 120_000,
  }, async () => {
    const started = await startPythonProvider(ROOT, ["python/examples/guess_number_env.py", "--port", "0"]);
    const child: ChildProcess = started.child;
    stops.push(() => child.kill("SIGKILL"));
    const walk = await FakeOpenEnv.start({ kind: "none" });
    stops.push(() => walk.stop());
    const timeouts = { step_timeout_s: 5, connect_timeout_s: 2 };
    const registry = await remoteRegistry(
      "Good",
      "CoordSokoban",
      { url: walk.base, max_sessions: 16, ...timeouts },
      WALK,
    );
    addRemoteTag(registry, "Bad", "CoordSokoban", { url: started.base, max_sessions: 6, ...timeouts }, WALK);
    // Good plays random moves, Bad bisects; the provider dies at the 10th turn on Bad.
    const random = randomPolicy();
    const bisect = bisectPolicy();
    let badTurns = 0;
    const policy: Policy = {
      name: "mixed",
      async generate(request) {
        if (request.episode.tag === "Good") return random.generate(request);
        if (++badTurns === 10) {
          child.kill("SIGKILL");
          await new Promise((resolve) => child.once("exit", resolve));
        }
        return bisect.generate(request);
      },
    };
    const { result, reported } = await play(registry, policy);
    const failed = result.episodes.filter((e) => e.tag === "Bad" && e.failure !== null);
    expect(failed.length).toBeGreaterThan(0);
    for (const e of failed) expect(e.failure).toMatch(/openenv_(closed|connect): /);
    // Sessions open at the kill lost their server mid-episode; later ones could not connect.
    expect(
      failed.some((e) =>
        /openenv_closed: .* while step waited for its answer|openenv_closed: ws:\S+ closed the session/.test(
          e.failure!,
        ),
      ),
    ).toBe(true);
    const good = result.episodes.filter((e) => e.tag === "Good");
    for (const e of good) expect(e.failure).toBeNull();
    expect([...reported.values()]).toEqual([1, 1, 1, 1, 1, 1]);
    sessionsGivenBack(registry);
  });

  it("through rollgym serve: a hanging env's groups arrive once, failed, and the others' kept", async () => {
    const registry = await goodAndBad({ kind: "hang", at: 3 });
    const server: RollgymServer = await buildServer({ registry, policy: randomPolicy() });
    stops.push(() => server.shutdown());
    const client = await TestClient.connect(await server.listen());
    stops.push(() => client.ws.terminate());
    client.send({ type: "credit", groups: 100 });
    client.send({
      type: "rollout",
      id: "r1",
      tags: [
        { tag: "Good", groups: 2 },
        { tag: "Bad", groups: 2 },
      ],
      mode: "val",
      group_size: 3,
      delivery: "stream",
    });
    await until(() => client.received.some((f) => f.type === "batch" || f.type === "error"));
    const groups = client.received.filter((f): f is Frame & { group: number } => f.type === "group");
    expect(groups.map((g) => g.group).sort()).toEqual([0, 1, 2, 3]);
    for (const g of groups) {
      const episodes = g.episodes as { tag: string; failure: string | null }[];
      for (const e of episodes)
        if (e.tag === "Bad") expect(e.failure).toMatch(/openenv_timeout: no answer to step/);
        else expect(e.failure).toBeNull();
    }
    const batch = client.received.find((f) => f.type === "batch")!;
    expect(batch).toBeDefined();
  });
});
