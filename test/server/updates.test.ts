// The trainer's weight-update bracket over real WebSockets on 127.0.0.1:0: begin_update and
// end_update, who may send them, the server's admission gate while one is open, and the defined
// outcome of every misuse (a second begin, end without begin, ordinals that do not increase, a
// trainer that disconnects mid-update, an update with nothing in flight).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { oraclePolicy } from "../../src/llm/builtin.ts";
import type { Policy } from "../../src/llm/policy.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { VersionedPolicy } from "../helpers/versioned-policy.ts";
import { type Frame, rolloutFrame, TestClient, until } from "../helpers/ws-client.ts";

const TRAINER = { type: "hello", protocol: 1, client: "trainer", role: "trainer" };

async function serve(policy: Policy, extra: Parameters<typeof buildServer>[0] = {}) {
  const server = await buildServer({ policy, maxBufferedGroups: 2, resumeGraceMs: 300, ...extra });
  return { server, url: await server.listen(0, "127.0.0.1") };
}

/** The next frame of `types` received after the first `from` frames. */
function nextOf(client: TestClient, from: number, ...types: string[]): Promise<Frame> {
  return client.next((f) => types.includes(f.type) && client.received.indexOf(f) >= from);
}

/** Sends `frame` and resolves to the answer of one of `types` that follows it. */
async function ask(client: TestClient, frame: Frame, ...types: string[]): Promise<Frame> {
  const from = client.received.length;
  client.send(frame);
  return nextOf(client, from, ...types);
}

/** Every frame sent before this returns has been handled by the server. */
async function roundTrip(client: TestClient): Promise<void> {
  await ask(client, { type: "cancel", rollout: "no-such-rollout" }, "error");
}

describe("weight updates over the protocol", () => {
  let policy: VersionedPolicy;
  let server: RollgymServer;
  let url: string;

  /** Closes `trainer` and waits until the server has let its session go. */
  const leave = async (trainer: TestClient): Promise<void> => {
    trainer.close();
    await trainer.closed();
    await until(() => server.state.updates.trainer === null);
  };

  beforeAll(async () => {
    policy = new VersionedPolicy();
    ({ server, url } = await serve(policy));
  });
  afterAll(async () => {
    await server.shutdown();
  });

  it("a trainer's welcome names the version; other clients' welcome is as it always was", async () => {
    const trainer = await TestClient.connect(url, { hello: TRAINER });
    const other = await TestClient.connect(url);
    expect(trainer.of("welcome")[0]).toMatchObject({ version: { label: "initial", ordinal: 0 } });
    expect(other.of("welcome")[0]).not.toHaveProperty("version");
    other.close();
    await leave(trainer);
  });

  it("brackets an update: admission closes, every session's new groups wait, the version moves", async () => {
    const trainer = await TestClient.connect(url, { hello: TRAINER });
    const player = await TestClient.connect(url);
    player.send({ type: "credit", groups: 100 });
    player.send(rolloutFrame("r", 6, 2, { delivery: "stream" }));
    // max_buffered_groups 2: two groups finish and the next ones wait for their acknowledgement.
    await until(() => player.of("group").length === 2);

    const begun = await ask(trainer, { type: "begin_update", id: "u1", mode: "keep" }, "update_begun");
    expect(begun).toMatchObject({ id: "u1", version: { label: "initial", ordinal: 0 }, paused: 1 });
    expect(policy.begun.at(-1)).toBe("keep");
    expect(server.state.updates.closed).toBe(true);
    // Room in the buffer, but the gate is closed: no group may start until the update ends.
    player.send({ type: "ack", rollout: "r", groups: [0, 1] });
    await roundTrip(player);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(policy.episodesStartedDuringUpdate).toBe(0);
    expect(player.of("group")).toHaveLength(2);

    const ended = await ask(
      trainer,
      { type: "end_update", id: "u1", version: { label: "step-1", ordinal: 1 } },
      "update_ended",
    );
    expect(ended).toEqual({ type: "update_ended", id: "u1", version: { label: "step-1", ordinal: 1 } });
    expect(policy.ended).toEqual([{ label: "step-1", ordinal: 1 }]);
    expect(server.state.updates.closed).toBe(false);
    // The rest of the rollout plays on.
    player.ws.on("message", () => {
      const f = player.received.at(-1)!;
      if (f.type === "group") player.send({ type: "ack", rollout: "r", groups: [f.group] });
    });
    const batch = await player.next((f) => f.type === "batch");
    expect(batch.kept).toHaveLength(6);
    player.send({ type: "ack", rollout: "r", groups: [], batch: true });
    player.close();
    await leave(trainer);
  });

  it("an update with nothing in flight: begun with in_flight 0, ended at once", async () => {
    const trainer = await TestClient.connect(url, { hello: TRAINER });
    const begun = await ask(trainer, { type: "begin_update", id: "idle" }, "update_begun", "error");
    expect(begun).toMatchObject({ type: "update_begun", in_flight: 0, version: { ordinal: 1 } });
    const ended = await ask(
      trainer,
      { type: "end_update", id: "idle", version: { label: "step-2", ordinal: 2 } },
      "update_ended",
      "error",
    );
    expect(ended).toMatchObject({ type: "update_ended", version: { label: "step-2", ordinal: 2 } });
    await leave(trainer);
  });

  it("refuses every misuse with a clear error, and the open update survives each", async () => {
    const trainer = await TestClient.connect(url, { hello: TRAINER });
    const other = await TestClient.connect(url);

    const notTrainer = await ask(other, { type: "begin_update", id: "x" }, "error");
    expect(notTrainer).toMatchObject({ code: "not_trainer" });
    expect(notTrainer.message).toMatch(/^begin_update: only the trainer session/);
    expect(
      await ask(other, { type: "end_update", id: "x", version: { label: "a", ordinal: 9 } }, "error"),
    ).toMatchObject({ code: "not_trainer", message: expect.stringMatching(/^end_update/) });

    const endWithout = await ask(
      trainer,
      { type: "end_update", id: "u", version: { label: "a", ordinal: 9 } },
      "error",
    );
    expect(endWithout).toMatchObject({ code: "update", message: expect.stringMatching(/no update is open/) });

    await ask(trainer, { type: "begin_update", id: "u" }, "update_begun");
    const second = await ask(trainer, { type: "begin_update", id: "v" }, "error");
    expect(second).toMatchObject({ code: "update" });
    expect(second.message).toContain('update "u" is still open');

    const wrongId = await ask(
      trainer,
      { type: "end_update", id: "v", version: { label: "a", ordinal: 9 } },
      "error",
    );
    expect(wrongId).toMatchObject({ code: "update", field: "id" });

    const stale = await ask(
      trainer,
      { type: "end_update", id: "u", version: { label: "again", ordinal: 2 } },
      "error",
    );
    expect(stale).toMatchObject({ code: "update", field: "version.ordinal" });
    expect(stale.message).toContain("got 2, must be greater than the current 2");
    expect(server.state.updates.closed).toBe(true);

    const ok = await ask(
      trainer,
      { type: "end_update", id: "u", version: { label: "step-5", ordinal: 5 } },
      "update_ended",
    );
    expect(ok).toMatchObject({ version: { label: "step-5", ordinal: 5 } });

    // A bad version is a schema error naming the field.
    const negative = await ask(
      trainer,
      { type: "end_update", id: "u", version: { label: "x", ordinal: -1 } },
      "error",
    );
    expect(negative).toMatchObject({ code: "bad_frame", field: "version.ordinal" });
    other.close();
    await leave(trainer);
  });

  it("one trainer at a time: a second one is refused while the first is connected", async () => {
    const first = await TestClient.connect(url, { hello: TRAINER });
    const second = await TestClient.connect(url, { hello: TRAINER });
    await second.closed();
    expect(second.closeCode).toBe(4003);
    expect(second.of("error")[0]).toMatchObject({ code: "not_trainer" });
    first.ws.terminate();
    // Its connection gone (its session in the resume grace), the first gives way.
    await until(() => server.state.updates.trainer?.outbound === null);
    const third = await TestClient.connect(url, { hello: TRAINER });
    expect(third.of("welcome")).toHaveLength(1);
    await leave(third);
  });

  it("a pause that fails reopens admission and says so", async () => {
    const trainer = await TestClient.connect(url, { hello: TRAINER });
    policy.failNextBegin = new Error("replica r0 did not pause");
    const refused = await ask(trainer, { type: "begin_update", id: "f" }, "error");
    expect(refused).toMatchObject({ code: "update" });
    expect(refused.message).toContain("replica r0 did not pause");
    expect(server.state.updates.closed).toBe(false);
    await leave(trainer);
  });
});

describe("a trainer that disconnects mid-update", () => {
  it("may resume and end it within the grace period", async () => {
    const policy = new VersionedPolicy();
    const { server, url } = await serve(policy);
    const trainer = await TestClient.connect(url, { hello: TRAINER });
    const session = trainer.of("welcome")[0].session;
    await ask(trainer, { type: "begin_update", id: "u" }, "update_begun");
    trainer.ws.terminate();
    await trainer.closed();
    const back = await TestClient.connect(url, { hello: { ...TRAINER, resume: session } });
    expect(back.of("welcome")[0]).toMatchObject({ resumed: true, update: { id: "u", begun: true } });
    await ask(back, { type: "end_update", id: "u", version: { label: "s1", ordinal: 1 } }, "update_ended");
    expect(policy.ended).toEqual([{ label: "s1", ordinal: 1 }]);
    back.close();
    await server.shutdown();
  });

  it("after the grace period, the engines resume at the old version and admission reopens", async () => {
    const policy = new VersionedPolicy();
    const { server, url } = await serve(policy);
    const trainer = await TestClient.connect(url, { hello: TRAINER });
    await ask(trainer, { type: "begin_update", id: "u" }, "update_begun");
    trainer.ws.terminate();
    await until(() => !server.state.updates.closed);
    expect(policy.ended).toEqual([{ label: "initial", ordinal: 0 }]);
    expect(policy.updating).toBe(false);
    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(metrics).toMatch(/^rollgym_weight_updates_total\{outcome="abandoned"\} 1$/m);
    // A new trainer starts from the old version.
    const next = await TestClient.connect(url, { hello: TRAINER });
    expect(next.of("welcome")[0]).toMatchObject({ version: { label: "initial", ordinal: 0 } });
    expect(next.of("welcome")[0]).not.toHaveProperty("update");
    next.close();
    await server.shutdown();
  });

  it("a new trainer takes over an update its predecessor left open", async () => {
    const policy = new VersionedPolicy();
    const { server, url } = await serve(policy, { resumeGraceMs: 60_000 });
    const old = await TestClient.connect(url, { hello: TRAINER });
    await ask(old, { type: "begin_update", id: "u" }, "update_begun");
    old.ws.terminate();
    await old.closed();
    await until(() => server.state.updates.trainer?.outbound === null);
    const successor = await TestClient.connect(url, { hello: TRAINER });
    expect(successor.of("welcome")[0]).toMatchObject({ update: { id: "u", begun: true } });
    await ask(
      successor,
      { type: "end_update", id: "u", version: { label: "s1", ordinal: 1 } },
      "update_ended",
    );
    successor.close();
    await server.shutdown();
  });
});

describe("a policy without weight updates", () => {
  it("answers begin_update with the reason", async () => {
    const oracle = oraclePolicy();
    const plain: Policy = { name: "plain", generate: (request) => oracle.generate(request) };
    const { server, url } = await serve(plain);
    const trainer = await TestClient.connect(url, { hello: TRAINER });
    const refused = await ask(trainer, { type: "begin_update", id: "u" }, "error");
    expect(refused).toMatchObject({ code: "update" });
    expect(refused.message).toBe(
      "begin_update: the server's policy plain has no weight updates to coordinate",
    );
    trainer.close();
    await server.shutdown();
  });
});
