// Issue #10's attacks that budgets.test.ts, backpressure.test.ts, limits.test.ts and the
// connection tests do not already cover, checked without timing: the server survives, the
// offending client gets its documented error or close code, bounds hold, and a well-behaved
// client beside it is served. (bench/attacks.ts measures the same attacks' latency and memory.)
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ChatPolicy } from "../../src/llm/openai-chat.ts";
import { startMockEngine } from "../../src/mock-engine/server.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { type Frame, playToVerdict, rolloutFrame, TestClient } from "../helpers/ws-client.ts";

const PROTOCOL = readFileSync(new URL("../../protocol/PROTOCOL.md", import.meta.url), "utf8");

/** A 2 × 2 stream rollout with credit and acks (so its session holds nothing after); resolves to its verdict. */
async function goodRollout(url: string, id: string): Promise<Frame> {
  const c = await TestClient.connect(url);
  const verdict = await playToVerdict(c, rolloutFrame(id, 2, 2, { seed: 3, delivery: "stream" }));
  expect(c.of("group").filter((g) => g.rollout === id)).toHaveLength(2);
  c.close();
  return verdict;
}

const rollout = (id: string, groups: number, groupSize: number, extra: Record<string, unknown> = {}) =>
  rolloutFrame(id, groups, groupSize, { seed: 1, ...extra });

describe("#10.2: responses built to make a regex backtrack", () => {
  it("~1 MB each: parsed and answered with env_stepped (no action found)", async () => {
    const server = await buildServer();
    try {
      const url = await server.listen(0, "127.0.0.1");
      const c = await TestClient.connect(url);
      c.send({ type: "env_open", id: "p", tag: "SimpleSokoban", groups: 3, group_size: 1, seed: 1 });
      const opened = await c.next((f) => f.id === "p" && f.type === "env_opened");
      const envIds = (opened.episodes as { env_id: number }[]).map((e) => e.env_id);
      const texts = [
        "</think><think>".repeat(66_000),
        "<think>".repeat(140_000),
        `${"</think>".repeat(60_000)}<answer>${" Up ||".repeat(20_000)}`,
      ];
      for (const [i, text] of texts.entries()) {
        const before = c.received.length;
        c.send({ type: "env_step", id: "p", responses: [{ env_id: envIds[i], text }] });
        const reply = await c.next(
          (f) =>
            f.id === "p" &&
            c.received.indexOf(f) >= before &&
            (f.type === "env_stepped" || f.type === "error"),
        );
        expect(reply.type).toBe("env_stepped");
        const [result] = reply.results as { actions: string[]; format_penalty: boolean }[];
        if (i < 2) expect(result).toMatchObject({ actions: [], format_penalty: true });
      }
      expect(await goodRollout(url, "after-parser")).toMatchObject({ type: "batch", failed: 0 });
      c.close();
    } finally {
      await server.shutdown();
    }
  });
});

describe("attacks on one server", () => {
  let server: RollgymServer;
  let url: string;
  beforeAll(async () => {
    server = await buildServer({
      maxEnvSessionsPerConnection: 3,
      maxEnvBytesPerConnection: 300_000,
    });
    url = await server.listen(0, "127.0.0.1");
  });
  afterAll(async () => {
    await server?.shutdown();
  });

  it("#10.7: env sessions per connection and the response text they hold are bounded", async () => {
    const c = await TestClient.connect(url);
    expect(c.of("welcome")[0].limits).toMatchObject({
      max_env_sessions_per_connection: 3,
      max_env_bytes_per_connection: 300_000,
    });
    for (const id of ["a", "b", "c", "d"])
      c.send({ type: "env_open", id, tag: "SimpleSokoban", groups: 1, group_size: 1, seed: 2, max_turn: 50 });
    const refused = await c.next((f) => f.id === "d" && (f.type === "error" || f.type === "env_opened"));
    expect(refused).toMatchObject({ type: "error", code: "limit" });
    expect(refused.message).toMatch(/max_env_sessions_per_connection/);
    // Closing one frees its place.
    c.send({ type: "env_close", id: "c" });
    c.send({ type: "env_open", id: "e", tag: "SimpleSokoban", groups: 1, group_size: 1, seed: 2 });
    expect(
      await c.next((f) => f.id === "e" && (f.type === "error" || f.type === "env_opened")),
    ).toMatchObject({
      type: "env_opened",
    });

    // 120 kB responses without an action: the episode goes on; the third would pass 300,000 bytes.
    const opened = await c.next((f) => f.id === "a" && f.type === "env_opened");
    const envId = (opened.episodes as { env_id: number }[])[0].env_id;
    const text = "x".repeat(120_000);
    const replies: Frame[] = [];
    for (let turn = 0; turn < 3; turn++) {
      const before = c.received.length;
      c.send({ type: "env_step", id: "a", responses: [{ env_id: envId, text }] });
      replies.push(
        await c.next(
          (f) =>
            f.id === "a" &&
            c.received.indexOf(f) >= before &&
            (f.type === "env_stepped" || f.type === "error"),
        ),
      );
    }
    expect(replies.map((r) => r.type)).toEqual(["env_stepped", "env_stepped", "error"]);
    expect(replies[2]).toMatchObject({ code: "limit" });
    expect(replies[2].message).toMatch(/max_held_bytes_per_connection is 300000/);
    // The refused step changed nothing: a small response is still taken, and the episode's
    // record has exactly the turns that were accepted.
    const before = c.received.length;
    c.send({ type: "env_step", id: "a", responses: [{ env_id: envId, text: "small" }] });
    expect(
      await c.next(
        (f) =>
          f.id === "a" && c.received.indexOf(f) >= before && (f.type === "env_stepped" || f.type === "error"),
      ),
    ).toMatchObject({ type: "env_stepped" });
    c.send({ type: "env_close", id: "a" });
    const closed = await c.next((f) => f.id === "a" && f.type === "env_closed");
    const [episode] = closed.episodes as { turns: unknown[] }[];
    expect(episode.turns).toHaveLength(3);
    // Nothing an env session did stops others.
    expect(await goodRollout(url, "after-env")).toMatchObject({ type: "batch", failed: 0 });
    c.close();
  });

  it("1007: a text frame with invalid UTF-8 is refused by the WebSocket layer, as PROTOCOL.md says", async () => {
    expect(PROTOCOL).toMatch(/^\| 1007 \|/m);
    expect(PROTOCOL).toMatch(/^\| 1006 \|/m);
    const c = await TestClient.connect(url);
    c.ws.on("error", () => {});
    c.ws.send(Buffer.from([0xc3, 0x28, 0xff]), { binary: false });
    await c.closed();
    expect(c.closeCode).toBe(1007);
    expect(await goodRollout(url, "after-utf8")).toMatchObject({ type: "batch", failed: 0 });
  });

  it("#10.3 and #10.5 together: a client holding its share in unacked groups and a running batch does not stop another", async () => {
    // Its own server: the one above holds one connection to 300,000 bytes.
    const server = await buildServer();
    const url = await server.listen(0, "127.0.0.1");
    const hog = await TestClient.connect(url);
    const limits = hog.of("welcome")[0].limits as Record<string, number>;
    // A finished batch whose groups are never acknowledged, then a batch reserving the rest of
    // its share (batch delivery reserves every episode up front).
    hog.send({ type: "credit", groups: 1_000 });
    hog.send(rollout("held", 64, 4));
    await hog.next((f) => f.rollout === "held" && f.type === "batch");
    hog.send({ type: "ack", rollout: "held", groups: [], batch: true });
    const share = limits.max_episodes_per_connection;
    hog.send(rollout("rest", Math.floor((share - 256) / 16), 16));
    // And more than its share: refused with limit, nothing else touched.
    hog.send(rollout("more", 64, 16));
    const refused = await hog.next((f) => f.rollout === "more" && (f.type === "error" || f.type === "batch"));
    expect(refused).toMatchObject({ type: "error", code: "limit" });
    expect(refused.message).toMatch(/max_episodes_per_connection/);
    // "rest" was accepted: the hog holds its 256 unacknowledged episodes and the reserved batch.
    expect(hog.of("error").filter((f) => f.rollout === "rest")).toHaveLength(0);
    const rest = Math.floor((share - 256) / 16) * 16;
    expect(server.state.episodesInFlight).toBeGreaterThanOrEqual(256 + rest);
    expect(server.state.episodesInFlight).toBeLessThanOrEqual(share);
    // Another client is served meanwhile.
    expect(await goodRollout(url, "beside-hog")).toMatchObject({ type: "batch", failed: 0 });
    hog.send({ type: "cancel", rollout: "rest" });
    await hog.next((f) => f.rollout === "rest" && f.type === "batch");
    hog.close();
    await server.shutdown();
  });
});

describe("#10.10: a hung inference request", () => {
  it("ends at the configured timeout and retry budget: the episode fails, the rollout ends, the server serves on", async () => {
    // Every completion takes an hour; the engine answers its other routes.
    const engine = await startMockEngine({ model: "mock-qwen", ttftMs: 3_600_000, closeGraceMs: 10 });
    const policy = new ChatPolicy({
      baseURL: engine.url,
      model: "mock-qwen",
      concurrency: 4,
      timeoutMs: 200,
      retryBudgetMs: 600,
      backoffMs: 10,
      maxBackoffMs: 50,
    });
    const server = await buildServer({ policy });
    try {
      const url = await server.listen(0, "127.0.0.1");
      const c = await TestClient.connect(url);
      c.send({ type: "credit", groups: 10 });
      c.send(rollout("hung", 2, 1, { delivery: "stream" }));
      const batch = await c.next((f) => f.rollout === "hung" && (f.type === "batch" || f.type === "error"));
      expect(batch).toMatchObject({ type: "batch", failed: 2 });
      const groups = c.of("group").filter((g) => g.rollout === "hung");
      expect(groups).toHaveLength(2);
      for (const g of groups)
        for (const e of g.episodes as { failure: string | null }[]) expect(e.failure).not.toBeNull();
      expect(await (await fetch(`${url}/healthz`)).json()).toMatchObject({ status: "ok" });
      c.close();
    } finally {
      await server.shutdown();
      await engine.close();
    }
  }, 60_000);
});
