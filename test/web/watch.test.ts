// Watch subscriptions against a trainer's stream rollout: the trainer receives the same frames
// byte for byte and its acknowledgements are the same with watchers attached; a watcher can
// neither cancel nor acknowledge the trainer's rollout; an endless stream's window verdicts reach
// watchers with the version in force; a watcher that never reads holds back nothing, costs the
// server a bounded buffer and is told what it lost; the count is limited.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { validateServerMessage } from "../../protocol/messages.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { TestClient, until } from "../helpers/ws-client.ts";

const TOKEN = "watch-token";
const WATCH_BUFFER = 32 * 1024;

/** A client of the watch tests' server, with its token. */
const connect = (url: string): Promise<TestClient> =>
  TestClient.connect(url, { token: TOKEN, hello: { type: "hello", protocol: 1, client: "watch-test" } });

const rolloutFrame = (id: string, groups: number) => ({
  type: "rollout",
  id,
  tags: [{ tag: "CoordSokoban", groups }],
  mode: "train",
  group_size: 8,
  seed: 4242,
  delivery: "stream",
});

/** A trainer's stream rollout: credit up front, every group acknowledged as it arrives. */
async function train(
  url: string,
  id: string,
  groups: number,
  during?: () => void,
): Promise<{ client: TestClient; groupBytes: Buffer[]; batchBytes: Buffer; acks: number[] }> {
  const client = await connect(url);
  const acks: number[] = [];
  client.ws.on("message", () => {
    const frame = client.received.at(-1)!;
    if (frame.type === "group") {
      acks.push(frame.group as number);
      client.send({ type: "ack", rollout: id, groups: [frame.group as number] });
    }
  });
  client.send({ type: "credit", groups: 100_000 });
  client.send(rolloutFrame(id, groups));
  during?.();
  await client.next((f) => f.type === "batch");
  client.send({ type: "ack", rollout: id, groups: [], batch: true });
  const groupBytes = client.raw.filter((_, i) => client.received[i].type === "group");
  const batchBytes = client.raw[client.received.findIndex((f) => f.type === "batch")];
  return { client, groupBytes, batchBytes, acks };
}

describe("watch subscriptions", () => {
  let server: RollgymServer;
  let url: string;
  beforeAll(async () => {
    // One group at a time, so two runs of the same rollout finish groups in the same order.
    server = await buildServer({
      token: TOKEN,
      groupConcurrency: 1,
      watch: { maxWatchers: 3, maxBufferBytes: WATCH_BUFFER },
    });
    url = await server.listen(0);
  });
  afterAll(async () => {
    await server.shutdown();
  });

  it("change nothing a trainer receives or acknowledges, and cannot cancel or acknowledge its rollout", async () => {
    const alone = await train(url, "run", 12);
    alone.client.close();

    const reader = await connect(url);
    reader.send({ type: "watch" });
    await reader.next((f) => f.type === "watching");
    const idle = await connect(url);
    idle.send({ type: "watch" });
    await idle.next((f) => f.type === "watching");
    idle.pauseReading();

    const watched = await train(url, "run", 12, () => {
      // The watcher knows the rollout's id and tries to act on it.
      reader.send({ type: "cancel", rollout: "run" });
      reader.send({ type: "ack", rollout: "run", groups: [0, 1, 2] });
    });
    watched.client.close();

    expect(watched.groupBytes).toHaveLength(12);
    expect(watched.groupBytes).toEqual(alone.groupBytes);
    expect(watched.batchBytes).toEqual(alone.batchBytes);
    expect(watched.acks).toEqual(alone.acks);
    expect(watched.client.of("error")).toEqual([]);
    const batch = watched.client.of("batch")[0];
    expect(batch.failed).toBe(0);

    const errors = reader.of("error").map((e) => e.code);
    expect(errors).toEqual(["unknown_rollout", "unknown_group"]);
    // The watcher saw the rollout start, all 12 groups and the verdict, all valid frames.
    await reader.next((f) => f.type === "watch_batch");
    const seen = reader.received.filter((f) => f.type.startsWith("watch"));
    for (const frame of seen) expect(validateServerMessage(frame)).toMatchObject({ ok: true });
    const stream = reader.of("watch_rollout")[0].stream;
    expect(reader.of("watch_rollout")[0]).toMatchObject({
      rollout: "run",
      mode: "train",
      group_size: 8,
      seed: 4242,
    });
    expect(
      reader
        .of("watch_group")
        .filter((f) => f.stream === stream)
        .map((f) => f.group),
    ).toEqual(watched.acks);
    expect(reader.of("watch_batch")[0]).toMatchObject({ stream, kept: batch.kept, dropped: batch.dropped });
    // Watch frames need no credit: the reader never sent any.
    expect(reader.of("group")).toEqual([]);
    reader.close();
    idle.resumeReading();
    idle.close();
  });

  it("an endless stream's watchers get each window's verdict with the version in force", async () => {
    const watcher = await connect(url);
    const trainer = await TestClient.connect(url, {
      token: TOKEN,
      hello: { type: "hello", protocol: 1, client: "watch-trainer", role: "trainer" },
    });
    try {
      try {
        watcher.send({ type: "watch" });
        await watcher.next((f) => f.type === "watching");
        trainer.ws.on("message", () => {
          const f = trainer.received.at(-1)!;
          if (f.type === "group") trainer.send({ type: "ack", rollout: "forever", groups: [f.group] });
        });
        trainer.send({ type: "credit", groups: 100_000 });
        trainer.send({ ...rolloutFrame("forever", 2), group_size: 2, endless: true });
        await until(() => trainer.of("window").length >= 2);
        trainer.send({ type: "begin_update", id: "u1" });
        await trainer.next((f) => f.type === "update_begun");
        trainer.send({ type: "end_update", id: "u1", version: { label: "step-1", ordinal: 1 } });
        await trainer.next((f) => f.type === "update_ended");
        const after = trainer.of("window").length;
        await until(() => trainer.of("window").length >= after + 2);
      } finally {
        trainer.send({ type: "cancel", rollout: "forever" });
        await trainer.next((f) => f.type === "batch");
        trainer.send({ type: "ack", rollout: "forever", groups: [], batch: true });
        trainer.close();
      }
      await watcher.next((f) => f.type === "watch_batch" && f.rollout === "forever");
    } finally {
      // Its subscription ends here, whatever the checks below find.
      watcher.close();
    }

    const started = watcher.of("watch_rollout").find((f) => f.rollout === "forever")!;
    expect(started).toMatchObject({ endless: true, delivery: "stream" });
    const windows = watcher.of("watch_window");
    for (const frame of windows) expect(validateServerMessage(frame)).toMatchObject({ ok: true });
    // The trainer's window frames, each copied with the stream's number and the version in force.
    expect(windows.map(({ type: _t, stream: _s, version: _v, ...verdict }) => verdict)).toEqual(
      trainer.of("window").map(({ type: _t, ...verdict }) => verdict),
    );
    expect(new Set(windows.map((f) => f.stream))).toEqual(new Set([started.stream]));
    expect(windows[0].version).toMatchObject({ ordinal: 0 });
    expect(windows.at(-1)!.version).toEqual({ label: "step-1", ordinal: 1 });
  });

  it("a watcher that never reads holds nothing back, costs a bounded buffer and is told what it lost", async () => {
    const idle = await connect(url);
    idle.send({ type: "watch" });
    await idle.next((f) => f.type === "watching");
    idle.pauseReading();
    let peak = 0;
    let largest = 0;
    const poll = setInterval(() => {
      peak = Math.max(peak, server.state.rolloutContext.watch!.stats().maxBuffered);
    }, 5);
    // Enough watch traffic to fill the kernel's socket buffers on both ends many times over.
    const runs = 4;
    let groups = 0;
    for (let i = 0; i < runs; i++) {
      const run = await train(url, `big-${i}`, 150);
      groups += run.groupBytes.length;
      largest = Math.max(largest, ...run.groupBytes.map((b) => b.byteLength));
      run.client.close();
    }
    clearInterval(poll);
    expect(groups).toBe(runs * 150);
    expect(server.state.rolloutContext.watch!.stats().unreported).toBeGreaterThan(0);
    // At most the limit plus the one frame that crossed it (watch frames are about a group frame's size).
    expect(peak).toBeLessThanOrEqual(WATCH_BUFFER + 2 * largest);

    idle.resumeReading();
    await idle.next((f) => f.type === "watch_gap");
    await new Promise((resolve) => setTimeout(resolve, 500));
    const gaps = idle.of("watch_gap");
    const lost = gaps.reduce((n, g) => n + (g.dropped as number), 0);
    const got = idle.received.filter((f) => /^watch_(rollout|group|batch)$/.test(f.type)).length;
    // Every frame was either delivered or counted as lost: runs × (start + groups + verdict).
    expect(got + lost).toBe(runs * (150 + 2));
    expect(lost).toBeGreaterThan(0);
    expect(new Set(gaps.flatMap((g) => g.streams as number[])).size).toBeGreaterThan(0);
    idle.close();
  });

  it("limits the number of watch subscriptions; unwatch frees one and stops the frames", async () => {
    // Earlier tests' watchers are gone once their closes have arrived.
    await expect.poll(() => server.state.rolloutContext.watch!.size).toBe(0);
    const clients = await Promise.all([0, 1, 2, 3].map(() => connect(url)));
    for (const c of clients) c.send({ type: "watch" });
    await Promise.all(clients.map((c) => c.next((f) => f.type === "watching" || f.type === "error")));
    const refused = clients.filter((c) => c.of("error").length > 0);
    expect(refused).toHaveLength(1);
    expect(refused[0].of("error")[0]).toMatchObject({ code: "limit" });
    expect(refused[0].of("error")[0].message).toContain("max_watchers is 3");

    const first = clients.find((c) => c !== refused[0])!;
    first.send({ type: "unwatch" });
    refused[0].send({ type: "watch" });
    await refused[0].next((f) => f.type === "watching");
    const before = first.received.length;
    const run = await train(url, "after-unwatch", 2);
    await refused[0].next((f) => f.type === "watch_batch");
    expect(first.received.length).toBe(before);
    run.client.close();
    for (const c of clients) c.close();
  });

  it("a watcher's connection closing ends its subscription", async () => {
    const hub = server.state.rolloutContext.watch!;
    await expect.poll(() => hub.size).toBe(0);
    const before = hub.size;
    const c = await connect(url);
    c.send({ type: "watch" });
    await c.next((f) => f.type === "watching");
    expect(hub.size).toBe(before + 1);
    c.close();
    await expect.poll(() => hub.size).toBe(before);
  });

  it("watch sits behind the same token as the rest of the protocol", async () => {
    await expect(TestClient.connect(url, { token: "wrong" })).rejects.toThrow("401");
  });
});
