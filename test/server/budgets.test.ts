// Episode budgets over rollouts, env sessions and unacknowledged groups (docs/server.md
// "Limits and fairness"): what the offending client gets, that another client's rollout
// completes meanwhile, and that the server's tally stays within the configured bounds.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import type { Session } from "../../src/server/session.ts";
import { playToVerdict, rolloutFrame, TestClient, until } from "../helpers/ws-client.ts";

let server: RollgymServer;
let url: string;
beforeAll(async () => {
  server = await buildServer({
    maxEpisodesInFlight: 96,
    maxEpisodesPerConnection: 40,
    maxBufferedGroups: 2,
    maxUnackedGroups: 20,
    resumeGraceMs: 200,
  });
  url = await server.listen(0);
});
afterAll(async () => {
  await server.shutdown();
});

const rollout = (id: string, groups: number, groupSize: number, delivery = "stream") =>
  rolloutFrame(id, groups, groupSize, { delivery });

function sessionOf(client: TestClient): Session {
  const id = client.of("welcome")[0].session as string;
  return server.state.sessions.get(id)!;
}

describe("episode budgets", () => {
  it("counts env sessions against the session's share and the global budget", async () => {
    const host = await TestClient.connect(url);
    const other = await TestClient.connect(url);
    host.send({ type: "env_open", id: "e", tag: "SimpleSokoban", groups: 8, group_size: 4 });
    await host.next((f) => f.type === "env_opened");
    expect(sessionOf(host).episodesHeld).toBe(32);
    expect(server.state.episodesInFlight).toBe(32);

    // 32 hosted + 16 asked > 40: the host's rollout is refused, naming the limit.
    host.send(rollout("r", 8, 2, "batch"));
    const refused = await host.next((f) => f.type === "error" && f.rollout === "r");
    expect(refused).toMatchObject({ code: "limit", field: "group_size" });
    expect(refused.message).toMatch(/max_episodes_per_connection is 40; this session holds 32/);
    // A stream rollout needs room for one group: 32 + 8 fits, 32 + 16 does not.
    host.send({ ...rollout("wide", 4, 16), tags: [{ tag: "SimpleSokoban", groups: 4 }] });
    expect(await host.next((f) => f.type === "error" && f.rollout === "wide")).toMatchObject({
      code: "limit",
    });
    // So is a second env session.
    host.send({ type: "env_open", id: "e2", tag: "SimpleSokoban", groups: 4, group_size: 4 });
    expect(await host.next((f) => f.type === "error" && f.id === "e2")).toMatchObject({ code: "limit" });

    // Another client's rollout completes meanwhile.
    expect(await playToVerdict(other, rollout("fine", 4, 2))).toMatchObject({
      type: "batch",
      episodes: 8,
      failed: 0,
    });

    // Closing the env session gives its episodes back.
    host.send({ type: "env_close", id: "e" });
    await host.next((f) => f.type === "env_closed");
    expect(sessionOf(host).episodesHeld).toBe(0);
    expect(await playToVerdict(host, rollout("r2", 8, 2))).toMatchObject({ type: "batch", episodes: 16 });
    await until(() => server.state.episodesInFlight === 0);
    host.close();
    other.close();
  });

  it("keeps hogs to their share: a paused huge stream and a client that never acknowledges", async () => {
    // A stream rollout holds only the groups it has started: paused behind max_buffered_groups
    // (2) without credit, 4,096 × 4 holds 2 groups' episodes, not 16,384.
    const streamHog = await TestClient.connect(url);
    streamHog.send(rollout("huge", 4096, 4));
    await until(() => sessionOf(streamHog).unacknowledgedGroups === 2);
    expect(sessionOf(streamHog).episodesHeld).toBe(8);
    // A batch delivery holds its whole batch, and its groups until acknowledged: 40, the share.
    const ackHog = await TestClient.connect(url);
    ackHog.send({ type: "credit", groups: 100 });
    ackHog.send({ ...rollout("all", 10, 4, "batch"), mode: "val" });
    await ackHog.next((f) => f.type === "batch" && f.rollout === "all");
    expect(sessionOf(ackHog).episodesHeld).toBe(40);
    ackHog.send(rollout("more", 1, 1));
    const more = await ackHog.next((f) => f.type === "error" && f.rollout === "more");
    expect(more).toMatchObject({ code: "limit" });
    expect(more.message).toMatch(/max_episodes_per_connection is 40; this session holds 40/);

    // Two other clients together take 2 × 24 = 48 more: 96, the global budget.
    const a = await TestClient.connect(url);
    const b = await TestClient.connect(url);
    a.send({ type: "credit", groups: 100 });
    b.send({ type: "credit", groups: 100 });
    a.send(rollout("a", 12, 2, "batch"));
    b.send(rollout("b", 12, 2, "batch"));
    for (const [client, id] of [
      [a, "a"],
      [b, "b"],
    ] as const) {
      const batch = await client.next((f) => f.type === "batch" && f.rollout === id);
      expect(batch).toMatchObject({ episodes: 24, failed: 0 });
      client.send({ type: "ack", rollout: id, groups: batch.kept as number[], batch: true });
    }
    expect(server.state.episodesInFlight).toBeLessThanOrEqual(96);
    await until(() => server.state.episodesInFlight === 48);
    // With the global budget nearly taken, a request that does not fit gets max_episodes_in_flight.
    const c = await TestClient.connect(url);
    c.send({ type: "credit", groups: 100 });
    c.send({ ...rollout("c", 10, 4, "batch"), mode: "val" });
    await c.next((f) => f.type === "batch" && f.rollout === "c");
    const d = await TestClient.connect(url);
    d.send(rollout("d", 10, 2, "batch"));
    const global = await d.next((f) => f.type === "error" && f.rollout === "d");
    expect(global).toMatchObject({ code: "limit" });
    expect(global.message).toMatch(/max_episodes_in_flight is 96; 88 are held/);
    // Acknowledging gives episodes back; the paused stream goes on once it gets credit.
    c.send({ type: "ack", rollout: "c", groups: Array.from({ length: 10 }, (_, g) => g), batch: true });
    await until(() => server.state.episodesInFlight === 48);
    expect(await playToVerdict(d, rollout("d2", 10, 2))).toMatchObject({ type: "batch", episodes: 20 });
    streamHog.send({ type: "cancel", rollout: "huge" });
    streamHog.send({ type: "credit", groups: 100 });
    const cancelled = await streamHog.next((f) => f.type === "batch" && f.rollout === "huge");
    expect((cancelled.not_started as number[]).length).toBeGreaterThanOrEqual(4093);
    for (const client of [streamHog, ackHog, a, b, c, d]) client.close();
    await until(() => server.state.episodesInFlight === 0);
  });

  it("has a stream rollout wait for room group by group rather than refuse it", async () => {
    const client = await TestClient.connect(url);
    client.send({ type: "env_open", id: "e", tag: "SimpleSokoban", groups: 9, group_size: 4 });
    await client.next((f) => f.type === "env_opened");
    // 36 of 40 held: room for one group of 4 at a time; each starts once the previous is acknowledged.
    let peak = 0;
    const sampler = setInterval(() => {
      peak = Math.max(peak, sessionOf(client).episodesHeld);
    }, 1);
    try {
      expect(await playToVerdict(client, rollout("narrow", 10, 4))).toMatchObject({
        type: "batch",
        episodes: 40,
        failed: 0,
      });
    } finally {
      clearInterval(sampler);
    }
    expect(peak).toBeLessThanOrEqual(40);
    await until(() => sessionOf(client).episodesHeld === 36);
    client.close();
    await until(() => server.state.episodesInFlight === 0);
  });

  it("counts unacknowledged groups after their rollout finished, and caps them per session", async () => {
    const client = await TestClient.connect(url);
    client.send({ type: "credit", groups: 100 });
    // Batch delivery: every group is kept (val mode) and sent; none is acknowledged.
    client.send({ ...rollout("keep", 20, 1, "batch"), mode: "val" });
    await client.next((f) => f.type === "batch" && f.rollout === "keep");
    const session = sessionOf(client);
    expect(session.unacknowledgedGroups).toBe(20);
    expect(session.episodesHeld).toBe(20);
    expect(server.state.episodesInFlight).toBe(20);

    client.send(rollout("next", 1, 1));
    const refused = await client.next((f) => f.type === "error" && f.rollout === "next");
    expect(refused).toMatchObject({ code: "limit" });
    expect(refused.message).toMatch(/max_unacked_groups is 20; this session holds 20/);
    // Meanwhile another client is served.
    const other = await TestClient.connect(url);
    expect(await playToVerdict(other, rollout("o", 2, 2))).toMatchObject({ type: "batch", episodes: 4 });

    client.send({ type: "ack", rollout: "keep", groups: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9] });
    await until(() => session.unacknowledgedGroups === 10);
    expect(session.episodesHeld).toBe(10);
    expect(await playToVerdict(client, rollout("next", 1, 1))).toMatchObject({ type: "batch", episodes: 1 });
    client.close();
    other.close();
  });

  it("keeps a rollout id taken while its groups are unacknowledged, and frees it after", async () => {
    const client = await TestClient.connect(url);
    client.send({ type: "credit", groups: 100 });
    client.send(rollout("same", 2, 1));
    await client.next((f) => f.type === "batch" && f.rollout === "same");
    // Confirming the batch frame alone does not free the id: its groups are still unacknowledged.
    client.send({ type: "ack", rollout: "same", groups: [], batch: true });
    client.send(rollout("same", 2, 1));
    const dup = await client.next((f) => f.type === "error" && f.rollout === "same");
    expect(dup).toMatchObject({ code: "duplicate_id" });
    expect(client.of("group").filter((g) => g.rollout === "same")).toHaveLength(2);
    client.send({ type: "ack", rollout: "same", groups: [0, 1] });
    // Now the id is free; the new rollout's groups are acknowledged on their own.
    client.send(rollout("same", 2, 1));
    await until(() => client.of("batch").filter((f) => f.rollout === "same").length === 2);
    const groups = client.of("group").filter((g) => g.rollout === "same");
    expect(groups).toHaveLength(4);
    client.send({ type: "ack", rollout: "same", groups: [0, 1] });
    await until(() => sessionOf(client).unacknowledgedGroups === 0);
    expect(client.of("error").filter((f) => f.code === "unknown_group")).toHaveLength(0);
    client.close();
  });
});

describe("sessions after a normal close", () => {
  // A grace period far beyond the test's time limit: a session still waiting fails the test.
  let server: RollgymServer;
  let url: string;
  beforeAll(async () => {
    server = await buildServer({ resumeGraceMs: 600_000 });
    url = await server.listen(0);
  });
  afterAll(async () => {
    await server.shutdown();
  });
  const sessionOf = (client: TestClient): Session =>
    server.state.sessions.get(client.of("welcome")[0].session as string)!;

  it("end at once when nothing is held, and wait for a resume when something is", async () => {
    const done = await TestClient.connect(url);
    expect(await playToVerdict(done, rollout("all-acked", 2, 1))).toMatchObject({ type: "batch" });
    const doneId = sessionOf(done).id;
    await until(() => sessionOf(done).idle);
    done.ws.close(1000);
    await until(() => !server.state.sessions.has(doneId));

    const holding = await TestClient.connect(url);
    holding.send({ type: "credit", groups: 10 });
    holding.send(rollout("held", 2, 1));
    await holding.next((f) => f.type === "batch" && f.rollout === "held");
    const held = sessionOf(holding);
    expect(held.idle).toBe(false);
    holding.ws.close(1000);
    await holding.closed();
    // Its unacknowledged groups wait for a resume for the grace period.
    expect(server.state.sessions.get(held.id)).toBe(held);
    const back = await TestClient.connect(url, {
      hello: { type: "hello", protocol: 1, client: "test", resume: held.id },
    });
    expect(back.of("welcome")[0]).toMatchObject({ resumed: true, session: held.id });
    back.close();
  });
});

describe("cancelling a paused stream rollout", () => {
  it("reports the groups that never started in the batch frame without building them", async () => {
    const big = await buildServer({ maxBufferedGroups: 2, maxGroupsPerRollout: 4096 });
    const bigUrl = await big.listen(0);
    try {
      const client = await TestClient.connect(bigUrl);
      client.send({ ...rollout("huge", 4096, 4), tags: [{ tag: "SimpleSokoban", groups: 4096 }] });
      const id = client.of("welcome")[0].session as string;
      const session = () => big.state.sessions.get(id)!;
      await until(() => session().unacknowledgedGroups === 2);
      client.send({ type: "cancel", rollout: "huge" });
      client.send({ type: "credit", groups: 10_000 });
      const batch = await client.next((f) => f.type === "batch");
      const notStarted = batch.not_started as number[];
      // Two groups finished before the cancel (one more may have been admitted); the rest never started.
      expect(notStarted.length).toBeGreaterThanOrEqual(4093);
      expect(notStarted).toEqual([...notStarted].sort((x, y) => x - y));
      expect(batch.failed_groups as number[]).toEqual(expect.arrayContaining(notStarted.slice(0, 10)));
      expect(batch.episodes as number).toBeLessThanOrEqual(3 * 4);
      // No group frame for a group that never started.
      const sent = client.of("group").map((g) => g.group as number);
      expect(sent.filter((g) => notStarted.includes(g))).toEqual([]);
      expect(session().unacknowledgedGroups).toBeLessThanOrEqual(3);
      client.close();
    } finally {
      await big.shutdown();
    }
  });
});
