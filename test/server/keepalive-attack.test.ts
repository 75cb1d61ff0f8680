// Idle rules against one cheap frame (issue 28.4): `idle_drop_s`, `watch_idle_s` and `env_idle_s`
// measure work, not frames, so sockets that send a `credit` (or an OpenEnv `state`) every few
// hundred milliseconds are as idle as silent ones. 1,023 such sockets with the server's default
// max_connections (1,024), and 32 such watchers with its default max_watchers, lock nobody out
// for longer than the idle bound; one address holds at most max_watchers_per_address watches.
import { afterEach, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { NodeClient } from "../../src/client/node.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { DEFAULT_CONNECTION_LIMITS } from "../../src/server/connections.ts";
import { DEFAULT_WATCH_LIMITS } from "../../src/server/watch.ts";
import { OpenEnvTestSession } from "../helpers/openenv-session.ts";
import { type Frame, playToVerdict, rolloutFrame, TestClient, until } from "../helpers/ws-client.ts";

let server: RollgymServer | null = null;
const stops: (() => void)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0)) stop();
  await server?.shutdown();
  server = null;
});

/** Attacker `i`'s source address: 64 loopback addresses, so no one address meets its caps. */
const attackerAddress = (i: number) => `127.0.1.${1 + (i % 64)}`;

/** Sends `frame` on every open client each `everyMs`: the cheap keep-alive of the issue. */
function keepAlive(clients: { send(frame: object): void; open(): boolean }[], frame: object, everyMs = 200) {
  const timer = setInterval(() => {
    for (const c of clients) if (c.open()) c.send(frame);
  }, everyMs);
  stops.push(() => clearInterval(timer));
}

const rolloutClient = (c: TestClient) => ({
  send: (frame: object) => c.send(frame as Record<string, unknown>),
  open: () => c.ws.readyState === WebSocket.OPEN,
});

/** `n` hello'd connections from the attacker addresses, opened `batch` at a time. */
async function connectMany(url: string, n: number, batch = 64): Promise<TestClient[]> {
  const clients: TestClient[] = [];
  for (let i = 0; i < n; i += batch)
    clients.push(
      ...(await Promise.all(
        Array.from({ length: Math.min(batch, n - i) }, (_, k) =>
          TestClient.connect(url, { localAddress: attackerAddress(i + k) }),
        ),
      )),
    );
  return clients;
}

/**
 * Tries `attempt` every 100 ms until it succeeds or `forMs` have passed since the first try:
 * the first success, or the last refusal's message. A bystander knocking, as a client retries.
 */
async function knock<T>(attempt: () => Promise<T>, forMs: number): Promise<T | string> {
  const deadline = performance.now() + forMs;
  for (;;) {
    try {
      return await attempt();
    } catch (error) {
      if (performance.now() > deadline) return (error as Error).message;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A whole Bandit episode on `session`: reset, then the first arm until done. */
async function playBandit(session: OpenEnvTestSession): Promise<Record<string, unknown>> {
  let answer = await session.send({ type: "reset", data: { seed: 7 } });
  for (let step = 0; answer.type === "observation" && answer.data.done !== true && step < 100; step++) {
    const { actions } = answer.data.observation as { actions: string[] };
    answer = await session.send({ type: "step", data: { action: actions[0] } });
  }
  return answer;
}

describe("keep-alive sockets at max_connections", () => {
  it("1,023 sockets sending a credit every 200 ms are idle: a bystander trainer gets in and finishes its rollout, and so does an OpenEnv user", async () => {
    const idleDropMs = 3_000;
    server = await buildServer({ connections: { idleDropMs } });
    const url = await server.listen(0);
    const { maxConnections } = DEFAULT_CONNECTION_LIMITS;
    // The page's Watch holds the last place: a watch is held work, never dropped as idle.
    const page = await TestClient.connect(url);
    page.send({ type: "watch" });
    await page.next((f) => f.type === "watching");
    const attackers = await connectMany(url, maxConnections - 1);
    expect(attackers.every((c) => c.of("welcome").length === 1)).toBe(true);
    keepAlive(attackers.map(rolloutClient), { type: "credit", groups: 1 });

    // Every credit arrives well within idle_drop_s, yet once that long has passed since their
    // hello a newcomer takes an attacker's place.
    const trainer = await knock(() => TestClient.connect(url), 4 * idleDropMs);
    expect(trainer).toBeInstanceOf(NodeClient);
    const verdict = await playToVerdict(trainer as TestClient, rolloutFrame("bystander", 2, 2));
    expect(verdict).toMatchObject({ type: "batch", failed: 0, episodes: 4 });
    const openenv = await knock(() => OpenEnvTestSession.open(url, "Bandit"), 4 * idleDropMs);
    expect(openenv).toBeInstanceOf(OpenEnvTestSession);
    expect(await playBandit(openenv as OpenEnvTestSession)).toMatchObject({
      type: "observation",
      data: { done: true },
    });

    // Two attackers made room (4011); the page kept its watch and saw the bystander's rollout.
    await until(() => attackers.filter((c) => c.closeCode === 4011).length === 2);
    expect(attackers.filter((c) => c.closeCode !== null && c.closeCode !== 4011)).toEqual([]);
    expect(page.closeCode).toBeNull();
    expect(page.of("watch_batch").map((f) => f.rollout)).toEqual(["bystander"]);
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
    for (const c of attackers) c.ws.terminate();
    (trainer as TestClient).close();
    (openenv as OpenEnvTestSession).ws.close();
  }, 120_000);

  it("an OpenEnv session in the middle of an episode that only asks for state is dropped for a newcomer (4011)", async () => {
    const idleDropMs = 1_000;
    server = await buildServer({ connections: { maxConnections: 2, idleDropMs } });
    const url = await server.listen(0);
    const page = await TestClient.connect(url);
    page.send({ type: "watch" });
    await page.next((f) => f.type === "watching");
    const poller = await OpenEnvTestSession.open(url, "SimpleSokoban");
    expect((await poller.send({ type: "reset", data: { seed: 3 } })).data.done).toBe(false);
    keepAlive([{ send: (m) => poller.ws.send(JSON.stringify(m)), open: () => poller.closeCode === null }], {
      type: "state",
    });
    await expect(TestClient.connect(url)).rejects.toThrow(/HTTP 503/);
    const newcomer = await knock(() => TestClient.connect(url), 6 * idleDropMs);
    expect(newcomer).toBeInstanceOf(NodeClient);
    await until(() => poller.closeCode !== null);
    expect(poller.closeCode).toBe(4011);
    expect(page.closeCode).toBeNull();
    (newcomer as TestClient).close();
    page.close();
  });

  it("an OpenEnv session that only asks for state is closed after env_idle_s", async () => {
    server = await buildServer({ envIdleMs: 1_000 });
    const url = await server.listen(0);
    const poller = await OpenEnvTestSession.open(url, "SimpleSokoban");
    await poller.send({ type: "reset", data: { seed: 3 } });
    keepAlive([{ send: (m) => poller.ws.send(JSON.stringify(m)), open: () => poller.closeCode === null }], {
      type: "state",
    });
    // Before issue 28.4, state kept it open for ever.
    await Promise.race([until(() => poller.closeCode !== null), new Promise((r) => setTimeout(r, 10_000))]);
    expect(poller.closeCode).toBe(1000);
    const error = poller.answers.find((a) => a.type === "error");
    expect(error?.data).toMatchObject({ code: "SESSION_ERROR" });
    expect(error?.data.message).toMatch(/no reset or step for 1 s \(env_idle_s\)/);
  });
});

describe("keep-alive watchers at max_watchers", () => {
  const watch = async (c: TestClient): Promise<Frame> => {
    const from = c.received.length;
    c.send({ type: "watch" });
    return c.next((f) => (f.type === "watching" || f.type === "error") && c.received.indexOf(f) >= from);
  };
  /** `watching`, or a throw with the refusal's message (for knock). */
  const watching = async (c: TestClient): Promise<Frame> => {
    const f = await watch(c);
    if (f.type !== "watching") throw new Error(String(f.message));
    return f;
  };

  it("32 watchers sending a credit every 200 ms are idle: past watch_idle_s a 33rd watch gets its subscription", async () => {
    const idleMs = 2_000;
    server = await buildServer({ watch: { idleMs } });
    const url = await server.listen(0);
    // The defaults, max_watchers 32 and max_watchers_per_address 8: the 32 from 4 addresses.
    const { maxWatchers } = DEFAULT_WATCH_LIMITS;
    const watchers = await Promise.all(
      Array.from({ length: maxWatchers }, (_, i) =>
        TestClient.connect(url, { localAddress: `127.0.1.${1 + (i % 4)}` }),
      ),
    );
    for (const c of watchers) expect(await watch(c)).toMatchObject({ type: "watching" });
    keepAlive(watchers.map(rolloutClient), { type: "credit", groups: 1 });
    const newcomer = await TestClient.connect(url);
    expect(await watch(newcomer)).toMatchObject({ type: "error", code: "limit" });

    const answer = await knock(() => watching(newcomer), 4 * idleMs);
    expect(answer).toMatchObject({ type: "watching" });
    const ended = watchers.filter((c) => c.of("error").some((e) => e.field === "watch_idle_s"));
    expect(ended).toHaveLength(1);
    expect(ended[0].of("error")[0].message).toMatch(
      /^max_watchers is 32 and this watch's connection did no work for \d+ s \(watch_idle_s is 2; credit frames are no work\)/,
    );
    // The new watcher sees a bystander's rollout.
    const trainer = await TestClient.connect(url);
    await playToVerdict(trainer, rolloutFrame("seen", 1, 1));
    expect(await newcomer.next((f) => f.type === "watch_batch")).toMatchObject({ rollout: "seen" });
    for (const c of [...watchers, newcomer, trainer]) c.close();
  });

  it("one address holds at most max_watchers_per_address watches; others still watch, and an idle one makes room within its address", async () => {
    const idleMs = 2_000;
    server = await buildServer({ watch: { idleMs } });
    const url = await server.listen(0);
    const perAddress = 8; // the default max_watchers_per_address
    const one = { localAddress: "127.0.1.1" };
    const watchers = await Promise.all(
      Array.from({ length: perAddress }, () => TestClient.connect(url, one)),
    );
    for (const c of watchers) expect(await watch(c)).toMatchObject({ type: "watching" });
    keepAlive(watchers.map(rolloutClient), { type: "credit", groups: 1 });
    const more = await TestClient.connect(url, one);
    const refused = await watch(more);
    expect(refused).toMatchObject({ type: "error", code: "limit" });
    expect(refused.message).toContain(`max_watchers_per_address is ${perAddress}`);
    // Far below max_watchers: another address still gets a watch at once.
    const other = await TestClient.connect(url, { localAddress: "127.0.1.2" });
    expect(await watch(other)).toMatchObject({ type: "watching" });
    // Past watch_idle_s the address's idle watch (credits are no work) gives way to its new one.
    const answer = await knock(() => watching(more), 4 * idleMs);
    expect(answer).toMatchObject({ type: "watching" });
    const ended = watchers.flatMap((c) => c.of("error").filter((e) => e.field === "watch_idle_s"));
    expect(ended).toHaveLength(1);
    expect(ended[0].message).toMatch(
      /^max_watchers_per_address is 8 and this watch's connection did no work/,
    );
    expect(other.of("error")).toEqual([]);
    for (const c of [...watchers, more, other]) c.close();
  });
});
