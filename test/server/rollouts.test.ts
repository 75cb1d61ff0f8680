// The rollout server over real WebSockets on 127.0.0.1:0: handshake, both deliveries,
// credit and acknowledgements, resume, cancel, auth, limits, and the HTTP routes (through fastify's
// inject: they need no socket).
import seedrandom from "seedrandom";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import { readF32, readI32, readU8 } from "../../protocol/codec.ts";
import { oraclePolicy } from "../../src/llm/builtin.ts";
import { runBatch } from "../../src/rollout/batch.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { type Frame, TestClient } from "../helpers/ws-client.ts";

let server: RollgymServer;
let url: string;

beforeAll(async () => {
  server = await buildServer({
    token: "s3cret",
    maxBufferedGroups: 4,
    resumeGraceMs: 5_000,
    maxGroupsPerRollout: 2000,
  });
  url = await server.listen(0);
});
afterAll(async () => {
  await server.shutdown();
});

const connect = (hello?: Frame) => TestClient.connect(url, { token: "s3cret", hello });
const get = (path: string) => server.app.inject({ method: "GET", url: path });

/** Collect a rollout's groups, acknowledging each as it arrives, until its batch frame. */
async function collect(
  client: TestClient,
  id: string,
  credit = 1000,
): Promise<{ groups: Frame[]; batch: Frame }> {
  const groups: Frame[] = [];
  client.send({ type: "credit", groups: credit });
  for (;;) {
    const next = await client.next(
      (f) => f.rollout === id && ((f.type === "group" && !groups.includes(f)) || f.type === "batch"),
    );
    if (next.type === "batch") {
      client.send({ type: "ack", rollout: id, groups: [], batch: true });
      return { groups, batch: next };
    }
    groups.push(next);
    client.send({ type: "ack", rollout: id, groups: [next.group as number] });
  }
}

describe("rollgym server", () => {
  it("answers /healthz, /v1/envs and /metrics", async () => {
    expect((await get("/healthz")).json()).toMatchObject({ status: "ok" });
    const envs = (await get("/v1/envs")).json() as { envs: { tag: string }[] };
    expect(envs.envs.map((e) => e.tag)).toContain("CoordSokoban");
    const text = (await get("/metrics")).body;
    for (const name of [
      "rollgym_rollouts_total",
      "rollgym_episodes_total",
      "rollgym_inference_request_seconds",
      "nodejs_eventloop_lag_seconds",
      "rollgym_connected_clients",
    ]) {
      expect(text).toContain(name);
    }
  });

  it("refuses a missing or wrong token at the upgrade, before any work", async () => {
    const sessions = server.state.sessions.size;
    const connected = (await get("/metrics")).body;
    await expect(TestClient.connect(url, {})).rejects.toThrow("HTTP 401");
    await expect(TestClient.connect(url, { token: "wrong" })).rejects.toThrow("HTTP 401");
    await expect(TestClient.connect(url, { queryToken: "wrong" })).rejects.toThrow("HTTP 401");
    // No session was made and no socket counted for the refused attempts.
    expect(server.state.sessions.size).toBe(sessions);
    const gauge = (text: string) => /^rollgym_connected_clients (\S+)$/m.exec(text)![1];
    expect(gauge((await get("/metrics")).body)).toBe(gauge(connected));
    const viaQuery = await TestClient.connect(url, { queryToken: "s3cret" });
    expect(viaQuery.of("welcome")).toHaveLength(1);
    viaQuery.close();
  });

  it("welcomes with the protocol version and limits, and refuses another version", async () => {
    const client = await connect();
    const welcome = client.of("welcome")[0];
    expect(welcome).toMatchObject({ protocol: 1, resumed: false, limits: { max_buffered_groups: 4 } });
    client.close();
    const old = await TestClient.connect(url, {
      token: "s3cret",
      hello: { type: "hello", protocol: 7, client: "old" },
    });
    await old.closed();
    expect(old.of("error")[0]).toMatchObject({ code: "protocol_version" });
    expect(old.closeCode).toBe(4001);
  });

  it("batch delivery matches the engine's own batch, arrays included", async () => {
    const client = await connect();
    client.send({
      type: "rollout",
      id: "r1",
      tags: [{ tag: "SimpleSokoban", groups: 6 }],
      mode: "train",
      group_size: 4,
      delivery: "batch",
      filter: { value: 0.6 },
    });
    const { groups, batch } = await collect(client, "r1");
    const request = defaultBatchRequest("train", {
      tags: [{ tag: "SimpleSokoban", groups: 6 }],
      groupSize: 4,
    });
    const expected = await runBatch(
      createRegistry(),
      { ...request, filter: { ...request.filter, value: 0.6 } },
      oraclePolicy(),
    );
    expect(batch.metrics).toEqual(expected.metrics);
    expect(batch.kept).toEqual(expected.groups.filter((g) => g.kept).map((g) => g.group_id));
    expect(groups.map((g) => g.group)).toEqual(batch.kept);
    for (const g of groups) {
      const ids = Array.from(readI32(g.env_ids_i32 as Uint8Array));
      expect(ids).toEqual((g.episodes as { env_id: number }[]).map((e) => e.env_id));
      const mine = expected.episodes.filter((e) => e.group_id === g.group);
      expect(Array.from(readF32(g.scores_f32 as Uint8Array))).toEqual(mine.map((e) => Math.fround(e.score)));
      expect(Array.from(readU8(g.success_u8 as Uint8Array))).toEqual(mine.map((e) => Number(e.success)));
      expect(g.kept).toBe(true);
    }
    client.close();
  });

  it("stream delivery sends every group with kept null, then the verdict", async () => {
    const client = await connect();
    client.send({
      type: "rollout",
      id: "s1",
      tags: [{ tag: "FrozenLake", groups: 5 }],
      mode: "val",
      group_size: 2,
      delivery: "stream",
    });
    const { groups, batch } = await collect(client, "s1");
    expect(groups.map((g) => g.group).sort()).toEqual([0, 1, 2, 3, 4]);
    for (const g of groups) expect(g.kept).toBeNull();
    expect(batch).toMatchObject({ kept: [0, 1, 2, 3, 4], episodes: 10, failed: 0 });
    expect(Object.keys(batch.metrics as object)).toContain("val-env/FrozenLake/success");
    client.close();
  });

  it("a client granting credit 1 and acknowledging a group a second never has two in flight", async () => {
    const client = await connect();
    client.send({
      type: "rollout",
      id: "c1",
      tags: [{ tag: "Bandit", groups: 6 }],
      mode: "train",
      group_size: 2,
      delivery: "stream",
    });
    let acked = 0;
    for (let i = 0; i < 6; i++) {
      client.send({ type: "credit", groups: 1 });
      const g = await client.next(
        (f) =>
          f.type === "group" &&
          f.rollout === "c1" &&
          f.seq !== undefined &&
          !(f as { _seen?: boolean })._seen,
      );
      (g as { _seen?: boolean })._seen = true;
      // Nothing else may arrive until this one is acknowledged and more credit granted.
      await new Promise((r) => setTimeout(r, 1000));
      expect(client.of("group").filter((f) => f.rollout === "c1").length - acked).toBe(1);
      client.send({ type: "ack", rollout: "c1", groups: [g.group as number] });
      acked++;
    }
    await client.next((f) => f.type === "batch" && f.rollout === "c1");
    client.close();
  });

  it("resumes after the connection is killed at 50 random points: no group lost, none twice", async () => {
    const rng = seedrandom("resume");
    let client = await connect({ type: "hello", protocol: 1, client: "resumer" });
    const session = client.of("welcome")[0].session as string;
    client.send({
      type: "rollout",
      id: "res",
      tags: [{ tag: "SimpleSokoban", groups: 60 }],
      mode: "train",
      group_size: 2,
      delivery: "stream",
    });
    const delivered: number[] = []; // what a deduplicating client hands to the user
    let received = 0;
    const take = (c: TestClient, ackProbability: number) => {
      for (const g of c.of("group")) {
        const id = g.group as number;
        received++;
        if (!delivered.includes(id)) delivered.push(id);
        // Some acknowledgements are lost with the connection; those groups must come back.
        if (rng() < ackProbability) c.send({ type: "ack", rollout: "res", groups: [id] });
      }
      c.received.length = 0;
    };
    for (let kill = 0; kill < 50; kill++) {
      client.send({ type: "credit", groups: 1 + Math.floor(rng() * 4) });
      await new Promise((r) => setTimeout(r, Math.floor(rng() * 30)));
      take(client, 0.7);
      client.ws.terminate();
      client = await connect({ type: "hello", protocol: 1, client: "resumer", resume: session });
      expect(client.of("welcome")[0]).toMatchObject({ resumed: true, session });
      client.received.length = 0;
    }
    client.send({ type: "credit", groups: 1000 });
    const batch = await client.next((f) => f.type === "batch" && f.rollout === "res");
    await new Promise((r) => setTimeout(r, 50));
    take(client, 1);
    expect(batch).toMatchObject({ episodes: 120 });
    expect([...delivered].sort((a, b) => a - b)).toEqual(Array.from({ length: 60 }, (_, i) => i));
    // Lost acknowledgements made the server send some groups again; the client dropped them.
    expect(received).toBeGreaterThan(delivered.length);
    client.close();
  });

  it("resuming while the old connection still looks open moves the session to the new one", async () => {
    const first = await connect({ type: "hello", protocol: 1, client: "early" });
    const session = first.of("welcome")[0].session as string;
    first.send({
      type: "rollout",
      id: "moved",
      tags: [{ tag: "Bandit", groups: 4 }],
      mode: "val",
      group_size: 1,
      delivery: "stream",
    });
    const second = await connect({ type: "hello", protocol: 1, client: "early", resume: session });
    await first.closed();
    expect(first.closeCode).toBe(1000);
    const { groups, batch } = await collect(second, "moved");
    expect(groups.map((g) => g.group).sort()).toEqual([0, 1, 2, 3]);
    expect(batch).toMatchObject({ episodes: 4 });
    second.close();
  });

  it("refuses a resume of an unknown session with close 4002", async () => {
    const client = await TestClient.connect(url, {
      token: "s3cret",
      hello: { type: "hello", protocol: 1, client: "x", resume: "nope" },
    });
    await client.closed();
    expect(client.of("error")[0]).toMatchObject({ code: "unknown_session" });
    expect(client.closeCode).toBe(4002);
  });

  it("answers bad frames with errors naming the problem and keeps the connection", async () => {
    const client = await connect();
    client.send({
      type: "rollout",
      id: "bad",
      tags: [{ tag: "Nope", groups: 1 }],
      mode: "train",
      group_size: 2,
      delivery: "batch",
    });
    expect(await client.next((f) => f.type === "error")).toMatchObject({ code: "unknown_tag" });
    client.send({
      type: "rollout",
      id: "big",
      tags: [{ tag: "Bandit", groups: 5000 }],
      mode: "train",
      group_size: 2,
      delivery: "batch",
    });
    expect(await client.next((f) => f.type === "error" && f.code === "limit")).toMatchObject({
      rollout: "big",
    });
    client.send({ type: "ack", rollout: "zzz", groups: [3] });
    expect(await client.next((f) => f.type === "error" && f.code === "unknown_group")).toBeTruthy();
    client.send({ type: "frobnicate" });
    expect(await client.next((f) => f.type === "error" && f.code === "unknown_type")).toBeTruthy();
    client.send({ type: "credit", groups: -1 });
    expect(await client.next((f) => f.type === "error" && f.code === "bad_frame")).toMatchObject({
      field: expect.stringContaining("groups"),
    });
    // Still usable afterwards.
    client.send({
      type: "rollout",
      id: "ok",
      tags: [{ tag: "Bandit", groups: 2 }],
      mode: "val",
      group_size: 1,
      delivery: "batch",
    });
    const { batch } = await collect(client, "ok");
    expect(batch.episodes).toBe(2);
    client.close();
  });

  it("cancels a rollout: no new turns, the batch reports cancelled episodes", async () => {
    const slow = {
      name: "slow",
      async generate(request: Parameters<ReturnType<typeof oraclePolicy>["generate"]>[0]) {
        await new Promise((resolve, reject) => {
          const timer = setTimeout(resolve, 60_000);
          request.signal?.addEventListener("abort", () => {
            clearTimeout(timer);
            reject(new Error("aborted"));
          });
        });
        return oraclePolicy().generate(request);
      },
    };
    const other = await buildServer({ policy: slow });
    const otherUrl = await other.listen(0);
    try {
      const client = await TestClient.connect(otherUrl);
      client.send({
        type: "rollout",
        id: "slow",
        tags: [{ tag: "SimpleSokoban", groups: 3 }],
        mode: "train",
        group_size: 2,
        delivery: "batch",
      });
      await new Promise((r) => setTimeout(r, 200));
      client.send({ type: "cancel", rollout: "slow" });
      client.send({ type: "credit", groups: 10 });
      const batch = await client.next((f) => f.type === "batch", 10_000);
      expect(batch).toMatchObject({ episodes: 6, failed: 6 });
      client.close();
    } finally {
      await other.shutdown();
    }
  });
});
