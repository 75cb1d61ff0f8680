// Connections and env sessions that hold shared capacity without using it (issue 19.6): an env
// session that takes no step is closed after env_idle_s; at max_connections the connection idle
// longest (no work: credits do not count, issue 28.4) and holding nothing makes room for a new
// one (4011); a client that does not answer the server's pings is dropped; at max_watchers the
// watch idle longest past watch_idle_s makes room for a new one. test/server/keepalive-attack.test.ts
// has the attacks at the default limits.
import { afterEach, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { encodeMessage } from "../../protocol/codec.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { playToVerdict, rolloutFrame, TestClient } from "../helpers/ws-client.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
let server: RollgymServer | null = null;
afterEach(async () => {
  await server?.shutdown();
  server = null;
});

describe("idle capacity", () => {
  it("closes an env session that takes no step for env_idle_s and releases its episodes", async () => {
    // Idle bounds of a second, ten times the talkers' 100 ms, so a stalled machine does not end
    // a session that talks.
    server = await buildServer({ envIdleMs: 1000 });
    const url = await server.listen(0);
    const c = await TestClient.connect(url);
    expect((c.of("welcome")[0].limits as Record<string, number>).env_idle_s).toBe(1);
    c.send({ type: "env_open", id: "idle", tag: "SimpleSokoban", groups: 2, group_size: 4 });
    c.send({ type: "env_open", id: "busy", tag: "SimpleSokoban", groups: 1, group_size: 1, max_turn: 100 });
    await c.next((f) => f.type === "env_opened" && f.id === "busy");
    expect(server.state.episodesInFlight).toBe(9);
    // "busy" steps every 100 ms until "idle", which does nothing, is closed.
    const isClosed = (f: { type: string; id?: unknown }) => f.type === "error" && f.id === "idle";
    while (!c.received.some(isClosed)) {
      c.send({ type: "env_step", id: "busy", responses: [{ env_id: 0, text: "" }] });
      await sleep(100);
    }
    const closed = await c.next(isClosed);
    expect(closed).toMatchObject({ code: "limit", field: "env_idle_s" });
    expect(closed.message).toMatch(/env_idle_s is 1; env session "idle" took no step/);
    expect(c.of("error").filter((f) => f.id === "busy")).toEqual([]);
    expect(server.state.episodesInFlight).toBe(1);
    c.send({ type: "env_step", id: "idle", responses: [{ env_id: 0, text: "" }] });
    expect(await c.next((f) => f.type === "error" && f.code === "unknown_env")).toBeTruthy();
    c.close();
  });

  it("at max_connections, drops the connection idle longest that holds nothing (4011); one whose env session steps stays", async () => {
    server = await buildServer({ connections: { maxConnections: 3, idleDropMs: 1500 } });
    const url = await server.listen(0);
    const first = await TestClient.connect(url);
    const stepper = await TestClient.connect(url);
    stepper.send({
      type: "env_open",
      id: "s",
      tag: "SimpleSokoban",
      groups: 1,
      group_size: 1,
      max_turn: 100,
    });
    await stepper.next((f) => f.type === "env_opened");
    // An open env session that takes no step holds nothing for the guard (issue 28.4).
    const second = await TestClient.connect(url);
    second.send({ type: "env_open", id: "s", tag: "Bandit", groups: 1, group_size: 1 });
    await second.next((f) => f.type === "env_opened");
    // Not idle long enough yet: refused as before.
    await expect(TestClient.connect(url)).rejects.toThrow(/HTTP 503/);
    // Steps every 100 ms for `ms` (each answered step is work).
    const step = async (ms: number) => {
      const end = performance.now() + ms;
      while (performance.now() < end) {
        stepper.send({ type: "env_step", id: "s", responses: [{ env_id: 0, text: "" }] });
        await sleep(100);
      }
    };
    await step(1600);
    const newcomer = await TestClient.connect(url);
    expect(newcomer.of("welcome")).toHaveLength(1);
    await first.closed();
    expect(first.closeCode).toBe(4011);
    expect(first.closeReason).toMatch(/idle for \d+ s with nothing held/);
    expect(stepper.closeCode).toBeNull();
    expect(second.closeCode).toBeNull();
    // The next one takes the idle env session's place; the one whose env session steps stays.
    await step(1600);
    await TestClient.connect(url);
    await second.closed();
    expect(second.closeCode).toBe(4011);
    expect(stepper.closeCode).toBeNull();
    expect(stepper.of("error")).toEqual([]);
    for (const c of [stepper, newcomer]) c.close();
  });

  it("drops a client that does not answer pings; one that does stays", async () => {
    server = await buildServer({ connections: { heartbeatMs: 100 } });
    const url = await server.listen(0);
    const alive = await TestClient.connect(url);
    const deaf = new WebSocket(`${url.replace(/^http/, "ws")}/v1/rollouts`, { autoPong: false });
    await new Promise((r) => deaf.once("open", r));
    deaf.send(encodeMessage({ type: "hello", protocol: 1, client: "deaf" }));
    const code = await new Promise<number>((r) => deaf.once("close", (c) => r(c)));
    expect(code).toBe(1006); // terminated, no close frame
    await sleep(300);
    expect(alive.closeCode).toBeNull();
    alive.close();
  });
});

describe("idle watchers", () => {
  it("at max_watchers, a new watch ends the subscription idle longest past watch_idle_s; a watcher that works stays", async () => {
    server = await buildServer({ watch: { maxWatchers: 2, idleMs: 1000 } });
    const url = await server.listen(0);
    const idle = await TestClient.connect(url);
    const talker = await TestClient.connect(url);
    expect(idle.of("welcome")[0].limits).toMatchObject({ max_watchers: 2, watch_idle_s: 1 });
    for (const c of [idle, talker]) {
      c.send({ type: "watch" });
      await c.next((f) => f.type === "watching");
    }
    // Not idle long enough yet: refused as before.
    const newcomer = await TestClient.connect(url);
    newcomer.send({ type: "watch" });
    expect(await newcomer.next((f) => f.type === "error")).toMatchObject({ code: "limit" });
    // The talker plays a small rollout every 100 ms or so (work); the idle one sends credits,
    // which are not.
    for (let i = 0; i < 14; i++) {
      idle.send({ type: "credit", groups: 1 });
      await playToVerdict(talker, { ...rolloutFrame(`t${i}`, 1, 1), tags: [{ tag: "Bandit", groups: 1 }] });
      await sleep(100);
    }
    newcomer.send({ type: "watch" });
    expect(await newcomer.next((f) => f.type === "watching")).toBeTruthy();
    const ended = await idle.next((f) => f.type === "error" && f.field === "watch_idle_s");
    expect(ended).toMatchObject({ code: "limit" });
    expect(ended.message).toMatch(/max_watchers is 2 and this watch's connection did no work for \d+ s/);
    expect(talker.of("error")).toEqual([]);
    expect(server.state.rolloutContext.watch?.size).toBe(2);
    // The ended watcher gets no more watch frames; the others see a rollout.
    const seen = idle.received.length;
    await playToVerdict(talker, rolloutFrame("w", 1, 1));
    await newcomer.next((f) => f.type === "watch_batch");
    expect(idle.received.slice(seen).filter((f) => f.type.startsWith("watch_"))).toEqual([]);
    for (const c of [idle, talker, newcomer]) c.close();
  });
});
