// An open weight update, seen from outside (issue #30 item 4), over real WebSockets on
// 127.0.0.1:0: /healthz and /metrics show it (its id, age, paused replicas, the version in force,
// its trainer's connection), the log says when its trainer is gone (a closed socket at once, a
// trainer that stops answering pings within the heartbeat), and the other clients' rollouts it
// holds are told which update holds them.
import { afterEach, describe, expect, it, vi } from "vitest";
import { WebSocket } from "ws";
import { decodeFrame, encodeMessage } from "../../protocol/codec.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { VersionedPolicy } from "../helpers/versioned-policy.ts";
import { type Frame, rolloutFrame, TestClient } from "../helpers/ws-client.ts";

const TRAINER = { type: "hello", protocol: 1, client: "trainer", role: "trainer" };

let server: RollgymServer | null = null;
afterEach(async () => {
  await server?.shutdown();
  server = null;
});

/** A server whose trainer may stay away a minute (the update stays open meanwhile). */
async function serve(extra: Parameters<typeof buildServer>[0] = {}) {
  const policy = new VersionedPolicy();
  server = await buildServer({ policy, resumeGraceMs: 60_000, ...extra });
  // The coordinator logs through the app's logger: every warning is recorded here.
  const warn = vi.spyOn(server.app.log, "warn");
  const info = vi.spyOn(server.app.log, "info");
  const url = await server.listen(0, "127.0.0.1");
  const said = (spy: typeof warn) => () => spy.mock.calls.map((call) => String(call.at(-1)));
  return { server, url, policy, warnings: said(warn), infos: said(info) };
}

/**
 * Sends `rollout` with ample credit and acknowledges its groups; resolves to its batch frame
 * (a `held` notice naming it on the way is not its end).
 */
async function played(client: TestClient, rollout: Frame): Promise<Frame> {
  const id = rollout.id;
  client.ws.on("message", () => {
    const f = client.received.at(-1)!;
    if (f.type === "group" && f.rollout === id) client.send({ type: "ack", rollout: id, groups: [f.group] });
  });
  client.send({ type: "credit", groups: 1000 });
  client.send(rollout);
  return client.next((f) => f.type === "batch" && f.rollout === id);
}

// biome-ignore lint/suspicious/noExplicitAny: /healthz's JSON, read field by field
async function healthOf(s: RollgymServer): Promise<Record<string, any>> {
  return (await s.app.inject({ method: "GET", url: "/healthz" })).json();
}

/** The value of the unlabelled series `name` in /metrics. */
async function gauge(s: RollgymServer, name: string): Promise<number> {
  const text = (await s.app.inject({ method: "GET", url: "/metrics" })).body;
  const line = text.split("\n").find((l) => l.startsWith(`${name} `));
  return line === undefined ? Number.NaN : Number(line.split(" ")[1]);
}

async function begin(trainer: TestClient, id: string): Promise<Frame> {
  const from = trainer.received.length;
  trainer.send({ type: "begin_update", id });
  return trainer.next((f) => f.type === "update_begun" && trainer.received.indexOf(f) >= from);
}

/** `client`'s `held` notices naming rollout `rollout`. */
function heldNotices(client: TestClient, rollout: string): Frame[] {
  return client.of("held").filter((f) => f.rollout === rollout);
}

describe("an open weight update is visible", () => {
  it("/healthz and /metrics show it while its trainer is connected, and nothing once it ends", async () => {
    const { server, url } = await serve();
    const trainer = await TestClient.connect(url, { hello: TRAINER });
    expect(await healthOf(server)).toMatchObject({ status: "ok" });
    expect(await healthOf(server)).not.toHaveProperty("update");
    expect(await gauge(server, "rollgym_update_open")).toBe(0);

    await begin(trainer, "u1");
    const health = await healthOf(server);
    expect(health).toMatchObject({
      status: "updating",
      update: {
        id: "u1",
        state: "paused",
        paused: 1,
        aborted: 0,
        version: { label: "initial", ordinal: 0 },
        trainer: "connected",
      },
    });
    expect(health.update.age_s).toBeGreaterThanOrEqual(0);
    expect(health.update).not.toHaveProperty("trainer_gone_s");
    expect(await gauge(server, "rollgym_update_open")).toBe(1);
    expect(await gauge(server, "rollgym_update_paused_replicas")).toBe(1);
    expect(await gauge(server, "rollgym_update_trainer_connected")).toBe(1);
    expect(await gauge(server, "rollgym_version_ordinal")).toBe(0);
    // No id or token in any label value: the update's gauges carry no labels at all.
    const text = (await server.app.inject({ method: "GET", url: "/metrics" })).body;
    expect(text).not.toContain("u1");

    trainer.send({ type: "end_update", id: "u1", version: { label: "step-1", ordinal: 1 } });
    await trainer.next((f) => f.type === "update_ended");
    expect(await healthOf(server)).toMatchObject({ status: "ok" });
    expect(await healthOf(server)).not.toHaveProperty("update");
    expect(await gauge(server, "rollgym_update_open")).toBe(0);
    expect(await gauge(server, "rollgym_update_paused_replicas")).toBe(0);
    expect(await gauge(server, "rollgym_version_ordinal")).toBe(1);
    trainer.close();
  });

  it("a trainer killed mid-update: /healthz, /metrics, the log and the held rollouts say so as its socket closes", async () => {
    const { server, url, warnings, infos } = await serve();
    const trainer = await TestClient.connect(url, { hello: TRAINER });
    const bystander = await TestClient.connect(url);
    await begin(trainer, "u1");
    // Its groups wait at the closed gate.
    const verdict = played(bystander, rolloutFrame("r", 4, 2, { delivery: "stream" }));
    expect(heldNotices(bystander, "r")).toEqual([]);

    trainer.ws.terminate();
    await expect.poll(async () => (await healthOf(server)).update?.trainer).toBe("disconnected");
    const health = await healthOf(server);
    expect(health).toMatchObject({ status: "updating", update: { id: "u1", paused: 1 } });
    expect(health.update.trainer_gone_s).toBeGreaterThanOrEqual(0);
    expect(await gauge(server, "rollgym_update_open")).toBe(1);
    expect(await gauge(server, "rollgym_update_trainer_connected")).toBe(0);
    const logged = warnings().find((w) => w.includes("mid-update"));
    expect(logged).toMatch(
      /^the trainer's connection is gone mid-update \(close code 1006\): weight update "u1" open for /,
    );
    expect(logged).toContain("resume_grace_s, 60 s");

    // The other client's rollout is told which update holds it, how long, and that its trainer is gone.
    await expect.poll(() => heldNotices(bystander, "r").length).toBe(1);
    const [notice] = heldNotices(bystander, "r");
    expect(notice.message).toMatch(
      /^rollout "r" is held: weight update "u1" open for [\d.]+ s \(1 replica paused, version "initial" \(ordinal 0\) in force\); its trainer's connection has been gone for [\d.]+ s \(if it does not resume within resume_grace_s, 60 s, the engines resume at "initial"\); its groups wait \(they are not lost\) until the update ends$/,
    );
    // A rollout that starts now is told at once.
    const late = await TestClient.connect(url);
    late.send({ type: "credit", groups: 100 });
    late.send(rolloutFrame("late", 1, 1, { delivery: "stream" }));
    const told = await late.next((f) => f.type === "held" || f.type === "error");
    expect(told).toMatchObject({ type: "held", rollout: "late", update: "u1" });
    expect(told.message).toContain('weight update "u1"');

    // A successor ends it; the held rollout then plays to its verdict, nothing lost.
    const successor = await TestClient.connect(url, { hello: TRAINER });
    expect(successor.of("welcome")[0]).toMatchObject({ update: { id: "u1" } });
    expect((await healthOf(server)).update?.trainer).toBe("connected");
    expect(infos()).toContainEqual(
      expect.stringMatching(
        /^a trainer took up weight update "u1" again, [\d.]+ s after its trainer's connection went$/,
      ),
    );
    successor.send({ type: "end_update", id: "u1", version: { label: "step-1", ordinal: 1 } });
    await successor.next((f) => f.type === "update_ended");
    expect(await verdict).toMatchObject({ type: "batch", rollout: "r", episodes: 8, failed: 0 });
    expect(heldNotices(bystander, "r")).toHaveLength(1);
    expect(await healthOf(server)).toMatchObject({ status: "ok" });
    for (const c of [bystander, late, successor]) c.close();
  });

  it("a trainer that stops answering pings is found by the heartbeat and logged", async () => {
    const { server, url, warnings } = await serve({ connections: { heartbeatMs: 100 } });
    // A raw client that answers pings until told to stop (a hung process keeps its socket open).
    let answering = true;
    const ws = new WebSocket(`${url.replace(/^http/, "ws")}/v1/rollouts`, { autoPong: false });
    const frames: Frame[] = [];
    ws.on("ping", () => {
      if (answering) ws.pong();
    });
    ws.on("message", (data) => frames.push(decodeFrame(new Uint8Array(data as Buffer)) as Frame));
    await new Promise((resolve) => ws.once("open", resolve));
    ws.send(encodeMessage(TRAINER));
    await expect.poll(() => frames.some((f) => f.type === "welcome")).toBe(true);
    ws.send(encodeMessage({ type: "begin_update", id: "hung" }));
    await expect.poll(() => frames.some((f) => f.type === "update_begun")).toBe(true);
    expect((await healthOf(server)).update).toMatchObject({ id: "hung", trainer: "connected" });

    answering = false;
    await expect
      .poll(async () => (await healthOf(server)).update?.trainer, { timeout: 10_000 })
      .toBe("disconnected");
    expect(warnings().find((w) => w.includes("mid-update"))).toMatch(
      /^the trainer's connection is gone mid-update \(it stopped answering the heartbeat's pings\): weight update "hung" open for /,
    );
    expect(await gauge(server, "rollgym_update_trainer_connected")).toBe(0);
    expect(await gauge(server, "rollgym_update_open")).toBe(1);
  });

  it("a trainer that says goodbye mid-update: logged, and admission reopens at the old version", async () => {
    const { server, url, policy, warnings } = await serve();
    const trainer = await TestClient.connect(url, { hello: TRAINER });
    await begin(trainer, "bye");
    trainer.close(1000);
    await expect
      .poll(() => warnings().find((w) => w.includes("session ended")))
      .toMatch(
        /^weight update "bye" open for [\d.]+ s .*: its trainer's session ended, so the engines resume at the old version and admission reopens$/,
      );
    await expect.poll(async () => (await healthOf(server)).status).toBe("ok");
    expect(policy.ended).toEqual([{ label: "initial", ordinal: 0 }]);
  });
});
