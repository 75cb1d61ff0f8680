// Continuous streaming and bounded staleness over real WebSockets on 127.0.0.1:0: an endless
// stream delivers every group exactly once across a resume and a cancel, group k always plays
// seed + k, each window gets its verdict; max_staleness never lets accepted + running pass
// (S + v + 1) × groups_per_step, checked on the counts the server reports with each group.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { VersionedPolicy } from "../helpers/versioned-policy.ts";
import { type Frame, rolloutFrame, TestClient, until } from "../helpers/ws-client.ts";

const TRAINER = { type: "hello", protocol: 1, client: "trainer", role: "trainer" };

let policy: VersionedPolicy;
let server: RollgymServer;
let url: string;

beforeAll(async () => {
  policy = new VersionedPolicy(1);
  server = await buildServer({ policy, maxBufferedGroups: 8, resumeGraceMs: 30_000 });
  url = await server.listen(0, "127.0.0.1");
});
afterAll(async () => {
  await server.shutdown();
});

/** Acknowledges each group of `rollout` as it arrives on `client`; returns the stop function. */
function autoAck(client: TestClient, rollout: string): () => void {
  const ack = () => {
    const f = client.received.at(-1)!;
    if (f.type === "group" && f.rollout === rollout) client.send({ type: "ack", rollout, groups: [f.group] });
  };
  client.ws.on("message", ack);
  return () => client.ws.off("message", ack);
}

describe("endless streams", () => {
  it("deliver each group exactly once across a resume, group k on seed + k, then end on cancel", async () => {
    const first = await TestClient.connect(url);
    const session = first.of("welcome")[0].session as string;
    first.send({ type: "credit", groups: 1000 });
    autoAck(first, "s");
    first.send(rolloutFrame("s", 2, 2, { delivery: "stream", endless: true, in_flight: 4, seed: 500 }));
    await until(() => first.of("group").length >= 5);
    // Killed mid-stream: unacknowledged groups come again on the resumed connection.
    first.ws.terminate();
    await first.closed();
    const second = await TestClient.connect(url, {
      hello: { type: "hello", protocol: 1, client: "test", resume: session },
    });
    second.send({ type: "credit", groups: 1000 });
    autoAck(second, "s");
    await until(() => second.of("window").length >= 3);
    second.send({ type: "cancel", rollout: "s" });
    const batch = await second.next((f) => f.type === "batch");
    second.send({ type: "ack", rollout: "s", groups: [], batch: true });

    const groups = new Map<number, Frame>();
    for (const f of [...first.of("group"), ...second.of("group")]) {
      const seen = groups.get(f.group as number);
      // A group sent twice is a resend of the same frame.
      if (seen) expect(f.seq).toBe(seen.seq);
      groups.set(f.group as number, f);
    }
    const windows = new Map<number, Frame>();
    for (const w of [...first.of("window"), ...second.of("window")]) windows.set(w.window as number, w);
    expect(batch).toMatchObject({ kept: [], dropped: [], failed_groups: [], windows: windows.size });
    // The windows are 0 … n-1, and together they account for every group the stream started.
    expect([...windows.keys()].sort((a, b) => a - b)).toEqual([...windows.keys()].map((_, i) => i));
    const started: number[] = [];
    for (const w of windows.values()) {
      const notStarted = new Set((w.not_started as number[] | undefined) ?? []);
      expect(w.first).toBe((w.window as number) * 2);
      const listed = [...(w.kept as number[]), ...(w.dropped as number[]), ...(w.failed_groups as number[])];
      expect(new Set(listed)).toEqual(new Set([w.first as number, (w.first as number) + 1]));
      for (const g of listed) if (!notStarted.has(g)) started.push(g);
    }
    // Exactly the started groups have a frame: none lost, none extra.
    expect([...groups.keys()].sort((a, b) => a - b)).toEqual(started.sort((a, b) => a - b));
    for (const [k, f] of groups) {
      expect(f.seed).toBe(500 + k);
      expect(f.window).toBe(Math.floor(k / 2));
      const episodes = f.episodes as { group_id: number; env_id: number }[];
      expect(episodes.map((e) => [e.group_id, e.env_id])).toEqual([
        [k, 2 * k],
        [k, 2 * k + 1],
      ]);
    }
    expect(windows.size).toBeGreaterThanOrEqual(3);
    second.close();
  });

  it("group k plays the same puzzle however the stream was paced", async () => {
    const a = await TestClient.connect(url);
    const b = await TestClient.connect(url);
    const states = async (client: TestClient, inFlight: number) => {
      client.send({ type: "credit", groups: 1000 });
      autoAck(client, "p");
      client.send(
        rolloutFrame("p", 3, 2, { delivery: "stream", endless: true, in_flight: inFlight, seed: 7 }),
      );
      await until(() => client.of("window").length >= 2);
      client.send({ type: "cancel", rollout: "p" });
      await client.next((f) => f.type === "batch");
      const byGroup = new Map<number, string>();
      for (const f of client.of("group")) {
        const [episode] = f.episodes as { turns: { state: string }[] }[];
        if (episode.turns.length > 0) byGroup.set(f.group as number, episode.turns[0].state);
      }
      return byGroup;
    };
    const [slow, fast] = await Promise.all([states(a, 1), states(b, 6)]);
    const common = [...slow.keys()].filter((k) => fast.has(k));
    expect(common.length).toBeGreaterThanOrEqual(6);
    for (const k of common) expect(fast.get(k)).toBe(slow.get(k));
    a.close();
    b.close();
  });

  it("pacing fields need stream delivery", async () => {
    const client = await TestClient.connect(url);
    for (const field of ["endless", "max_staleness", "drop_older_than"] as const) {
      client.send(rolloutFrame(`b-${field}`, 1, 2, { [field]: field === "endless" ? true : 1 }));
      const error = await client.next((f) => f.type === "error" && f.rollout === `b-${field}`);
      expect(error).toMatchObject({ code: "bad_frame", field });
      expect(error.message).toBe(`${field} paces a stream rollout: it needs delivery "stream", not "batch"`);
    }
    client.close();
  });
});

describe("drop_older_than", () => {
  it("drops finished groups older than the bound, lists and counts them, and sends the rest", async () => {
    // A server of its own, whose turns take long enough for an update to land inside every group.
    const policy = new VersionedPolicy(20);
    const server = await buildServer({ policy, maxBufferedGroups: 8 });
    const url = await server.listen(0, "127.0.0.1");
    const trainer = await TestClient.connect(url, { hello: TRAINER });
    const ask = async (frame: Frame, type: string) => {
      const from = trainer.received.length;
      trainer.send(frame);
      return trainer.next(
        (f) => (f.type === type || f.type === "error") && trainer.received.indexOf(f) >= from,
      );
    };
    const base = policy.current.ordinal;
    // A named version first, so every turn of the rollout is stamped.
    await ask({ type: "begin_update", id: "d0" }, "update_begun");
    await ask({ type: "end_update", id: "d0", version: { label: "d0", ordinal: base + 1 } }, "update_ended");
    trainer.send({ type: "credit", groups: 1000 });
    autoAck(trainer, "d");
    trainer.send(rolloutFrame("d", 4, 2, { delivery: "stream", drop_older_than: 0, max_turn: 3 }));
    // Every group is running (its first turn played) when the next update lands.
    await until(() => policy.inFlight > 0);
    await ask({ type: "begin_update", id: "d1" }, "update_begun");
    await ask({ type: "end_update", id: "d1", version: { label: "d1", ordinal: base + 2 } }, "update_ended");
    const batch = await trainer.next((f) => f.type === "batch" && f.rollout === "d");
    trainer.send({ type: "ack", rollout: "d", groups: [], batch: true });
    const dropped = (batch.stale_dropped as number[] | undefined) ?? [];
    const sent = trainer.of("group").filter((f) => f.rollout === "d");
    expect(dropped.length).toBeGreaterThan(0);
    expect(dropped.length + sent.length).toBe(4);
    for (const f of sent) expect(dropped).not.toContain(f.group);
    // What was sent was no older than the bound when it finished: all its turns at one version
    // (before the update, or after it); what spans the update is what was dropped.
    for (const f of sent) expect(f.min_version).toBe(f.max_version);
    for (const g of dropped)
      expect([...(batch.kept as number[]), ...(batch.dropped as number[])]).not.toContain(g);
    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(Number(/^rollgym_stale_groups_dropped_total (\S+)$/m.exec(metrics)?.[1])).toBe(dropped.length);
    trainer.close();
    await server.shutdown();
  });
});

describe("bounded staleness", () => {
  for (const S of [0, 1, 2]) {
    it(`max_staleness ${S}: accepted + running never passes (S + v + 1) × groups_per_step`, async () => {
      const B = 2;
      const trainer = await TestClient.connect(url, { hello: TRAINER });
      const id = `stale-${S}`;
      trainer.send({ type: "credit", groups: 1000 });
      autoAck(trainer, id);
      trainer.send(
        rolloutFrame(id, 1, 2, {
          delivery: "stream",
          endless: true,
          in_flight: 8,
          max_staleness: S,
          groups_per_step: B,
        }),
      );
      // The simulated trainer: one update per B groups received, five updates in all.
      const start = policy.current.ordinal;
      for (let step = 1; step <= 5; step++) {
        await until(() => trainer.of("group").filter((f) => f.rollout === id).length >= step * B);
        const from = trainer.received.length;
        trainer.send({ type: "begin_update", id: `${id}-${step}` });
        await trainer.next((f) => f.type === "update_begun" && trainer.received.indexOf(f) >= from);
        const ordinal = start + step;
        trainer.send({ type: "end_update", id: `${id}-${step}`, version: { label: `s${ordinal}`, ordinal } });
        await trainer.next((f) => f.type === "update_ended" && trainer.received.indexOf(f) >= from);
      }
      trainer.send({ type: "cancel", rollout: id });
      await trainer.next((f) => f.type === "batch" && f.rollout === id);
      trainer.send({ type: "ack", rollout: id, groups: [], batch: true });

      const groups = trainer.of("group").filter((f) => f.rollout === id);
      const admitted = groups.map((f) => f.admitted as Record<string, number>);
      for (const a of admitted) {
        expect(a.capacity).toBe((S + a.version + 1) * B);
        expect(a.accepted + a.running).toBeLessThanOrEqual(a.capacity);
      }
      // Cumulatively: the groups admitted by version v never number more than (S + v + 1) × B,
      // and before the first update the rule is what held the stream back (it reached capacity).
      for (let v = 0; v <= 5; v++) {
        expect(admitted.filter((a) => a.version <= v).length).toBeLessThanOrEqual((S + v + 1) * B);
      }
      expect(admitted.filter((a) => a.version === 0).length).toBe((S + 1) * B);
      // Versions were used: every frame says which produced it (the turn stamps come from the engine side).
      for (const f of groups) expect(f).toHaveProperty("admitted");
      trainer.close();
      await trainer.closed();
      // Gone from the server too, so the next trainer's hello is not refused.
      await until(() => (server.state.updates.trainer?.outbound ?? null) === null);
    });
  }
});
