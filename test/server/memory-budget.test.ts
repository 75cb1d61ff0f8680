// One memory budget for every kind of session (issue 19.1, docs/server.md "Memory budget"):
// rollouts in flight, groups held for acknowledgement and env sessions charge the same
// server-wide max_held_bytes and per-session share. A request that does not fit is refused with
// `limit` naming the bound; a rollout whose turns outgrow it is cancelled (shed); a bystander's
// rollout completes and /healthz answers meanwhile.
import { afterEach, describe, expect, it } from "vitest";
import { oraclePolicy } from "../../src/llm/builtin.ts";
import type { Policy } from "../../src/llm/policy.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { holdWhenRoom, openSession } from "../../src/server/budget.ts";
import { EPISODE_BYTES } from "../../src/server/memory-costs.ts";
import type { Session } from "../../src/server/session.ts";
import { type Frame, playToVerdict, rolloutFrame, TestClient, until } from "../helpers/ws-client.ts";

const MiB = 1 << 20;

/**
 * The oracle, except that episodes of `gated` tags wait until `open()` before each answer, and
 * episodes of `huge` tags answer `hugeText` (no action: the episode goes on to max_turn).
 */
function testPolicy(gated: string[], huge: string[], hugeText: string): Policy & { open(): void } {
  const oracle = oraclePolicy();
  let open = () => {};
  const gate = new Promise<void>((resolve) => {
    open = resolve;
  });
  return {
    ...oracle,
    name: "test",
    async generate(request) {
      if (gated.includes(request.episode.tag)) await gate;
      if (huge.includes(request.episode.tag)) return { text: hugeText, finishReason: "stop" };
      return oracle.generate(request);
    },
    open: () => open(),
  };
}

let server: RollgymServer | null = null;
afterEach(async () => {
  await server?.shutdown();
  server = null;
});

function sessionOf(client: TestClient): Session {
  return server!.state.sessions.get(client.of("welcome")[0].session as string)!;
}

/** Steps env session `id` with `text` until a step is refused; returns the refusal. */
async function stepUntilRefused(c: TestClient, id: string, text: string): Promise<Frame> {
  for (let turn = 0; ; turn++) {
    const from = c.received.length;
    c.send({ type: "env_step", id, responses: [{ env_id: turn % 8, text }] });
    const r = await c.next(
      (f) => f.id === id && c.received.indexOf(f) >= from && (f.type === "env_stepped" || f.type === "error"),
    );
    if (r.type === "error") return r;
  }
}

describe("one memory budget", () => {
  it("charges env sessions, held groups and rollouts in flight to one total, refuses past it, and a bystander completes", async () => {
    const policy = testPolicy(["CoordFrozenLake", "FrozenLake"], [], "");
    server = await buildServer({
      policy,
      maxHeldBytes: 4 * MiB,
      maxHeldBytesPerConnection: 2 * MiB,
      maxBufferedGroups: 16,
      resumeGraceMs: 100,
    });
    const url = await server.listen(0);
    const memory = server.state.memory;
    const bystander = await TestClient.connect(url);
    expect(bystander.of("welcome")[0].limits).toMatchObject({
      max_held_bytes: 4 * MiB,
      max_held_bytes_per_connection: 2 * MiB,
    });
    // The bystander's rollout is admitted first and waits at the engine (gated) while others fill.
    const verdict = playToVerdict(bystander, {
      ...rolloutFrame("bystander", 4, 2, { delivery: "stream" }),
      tags: [{ tag: "FrozenLake", groups: 4 }],
    });
    await until(() => sessionOf(bystander).memory.kinds.rollouts > 0);

    // An env session filled with 200 kB turns until its session's share refuses.
    const envs = await TestClient.connect(url);
    envs.send({ type: "env_open", id: "e", tag: "SimpleSokoban", groups: 2, group_size: 4, max_turn: 50 });
    await envs.next((f) => f.type === "env_opened");
    const shareRefusal = await stepUntilRefused(envs, "e", "x".repeat(200_000));
    expect(shareRefusal).toMatchObject({ code: "limit", field: "responses" });
    expect(shareRefusal.message).toMatch(
      /^max_held_bytes_per_connection is 2097152; this session holds \d+ bytes/,
    );

    // Groups held for acknowledgement: a stream rollout read without credit stops at 16 queued
    // groups, their encoded frames held; and a gated CoordFrozenLake rollout stays in flight.
    const holder = await TestClient.connect(url);
    holder.send(rolloutFrame("unacked", 64, 8, { delivery: "stream" }));
    await until(() => sessionOf(holder).unacknowledgedGroups === 16);
    holder.send({ ...rolloutFrame("inflight", 2, 2), tags: [{ tag: "CoordFrozenLake", groups: 2 }] });
    await until(() => sessionOf(holder).memory.kinds.rollouts >= 4 * EPISODE_BYTES);

    const kinds = { ...memory.kinds };
    expect(kinds.env).toBeGreaterThan(MiB);
    expect(kinds.groups).toBeGreaterThan(16 * 8 * 500);
    expect(kinds.rollouts).toBeGreaterThanOrEqual((8 + 4) * EPISODE_BYTES);
    expect(memory.held).toBe(kinds.env + kinds.groups + kinds.rollouts);
    expect(memory.held).toBeLessThanOrEqual(4 * MiB);

    // A newcomer's 1,024 episodes (2 MiB) fit its share but not the total: refused, naming it.
    const newcomer = await TestClient.connect(url);
    newcomer.send({ type: "env_open", id: "n", tag: "Bandit", groups: 512, group_size: 2 });
    const refused = await newcomer.next((f) => f.type === "error" && f.id === "n");
    expect(refused).toMatchObject({ code: "limit", field: "group_size" });
    expect(refused.message).toMatch(
      /^max_held_bytes is 4194304; \d+ bytes are held over all sessions \(rollouts in flight [1-9]\d*, groups held for acknowledgement [1-9]\d*, env sessions [1-9]\d*\) and this env session \(1024 episodes\) needs 2097152/,
    );
    newcomer.send(rolloutFrame("r", 512, 2));
    expect(await newcomer.next((f) => f.type === "error" && f.rollout === "r")).toMatchObject({
      code: "limit",
    });
    expect(await (await fetch(`${url}/healthz`)).json()).toMatchObject({ status: "ok" });

    // The bystander's rollout completes.
    policy.open();
    expect(await verdict).toMatchObject({ type: "batch", episodes: 8, failed: 0 });
    expect(bystander.of("group").filter((g) => g.rollout === "bystander")).toHaveLength(4);

    // Everything held goes back when the sessions end (after their resume grace).
    for (const c of [bystander, envs, holder, newcomer]) c.close();
    await until(() => memory.held === 0);
    expect(memory.kinds).toEqual({ rollouts: 0, groups: 0, env: 0 });
  });

  it("cancels a rollout whose turns outgrow the budget (shed), naming the limit; the bystander completes", async () => {
    // CoordSokoban episodes answer 100 kB without an action each turn, so they grow to max_turn.
    server = await buildServer({
      policy: testPolicy([], ["CoordSokoban"], "x".repeat(100_000)),
      maxHeldBytes: 8 * MiB,
      maxHeldBytesPerConnection: 4 * MiB,
    });
    const url = await server.listen(0);
    const memory = server.state.memory;
    let peak = 0;
    const watch = setInterval(() => {
      peak = Math.max(peak, memory.held);
    }, 1);
    const hog = await TestClient.connect(url);
    const bystander = await TestClient.connect(url);
    hog.send({ type: "credit", groups: 100 });
    hog.send({ ...rolloutFrame("hog", 4, 4, { max_turn: 50 }), tags: [{ tag: "CoordSokoban", groups: 4 }] });
    const shed = await hog.next((f) => f.type === "error" && f.rollout === "hog");
    expect(shed).toMatchObject({ code: "limit", field: "max_held_bytes" });
    expect(shed.message).toMatch(
      /^max_held_bytes_per_connection is 4194304; \d+ bytes were held .* so this rollout is cancelled/,
    );
    const hogVerdict = await hog.next((f) => f.type === "batch" && f.rollout === "hog");
    expect(hogVerdict.failed).toBeGreaterThan(0);
    expect(memory.shed).toBe(1);
    // Cancelled within a turn of passing its share: 16 episodes × one 100 kB turn at most beyond it.
    clearInterval(watch);
    expect(peak).toBeLessThanOrEqual(4 * MiB + 16 * 2 * 100_600);
    expect(await playToVerdict(bystander, rolloutFrame("fine", 4, 2, { delivery: "stream" }))).toMatchObject({
      type: "batch",
      failed: 0,
    });
    expect(await (await fetch(`${url}/healthz`)).json()).toMatchObject({ status: "ok" });
    hog.close();
    bystander.close();
  });

  it("admits waiting groups one after another against what each took: room for one admits one", async () => {
    const group = 2 * EPISODE_BYTES; // a group of 2 episodes, as a stream rollout's meter charges it
    server = await buildServer({ maxHeldBytes: 4 * group, maxHeldBytesPerConnection: 4 * group });
    const { state } = server;
    const filler = state.memory.account();
    filler.charge("env", 4 * group); // the budget is full
    const abort = new AbortController();
    const admitted: number[] = [];
    const waits = [0, 1, 2].map((i) => {
      const session = openSession(state);
      // What a stream rollout does once its group is held: charge the group's episodes.
      const held = () => session.memory.charge("rollouts", group);
      return holdWhenRoom(state, session, 2, group, abort.signal, held).then((ok) => ok && admitted.push(i));
    });
    const settle = () => new Promise((resolve) => setTimeout(resolve, 10));
    await settle();
    expect(admitted).toEqual([]);
    // Room for one group: only the oldest waiter gets it, and the total stays within the bound.
    filler.charge("env", -group);
    await settle();
    expect(admitted).toEqual([0]);
    expect(state.memory.held).toBe(4 * group);
    expect(state.memory.shed).toBe(0);
    filler.charge("env", -group);
    await settle();
    expect(admitted).toEqual([0, 1]);
    abort.abort();
    await Promise.all(waits);
    expect(admitted).toEqual([0, 1]);
  });
});
