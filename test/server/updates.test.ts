// The trainer's weight-update bracket over real WebSockets on 127.0.0.1:0: begin_update and
// end_update, who may send them, the server's admission gate while one is open, and the defined
// outcome of every misuse (a second begin, end without begin, ordinals that do not increase or
// pass the maximum, a trainer that disconnects mid-update, an update left open past
// max_update_s, an update with nothing in flight, a trainer without the server's trainer token).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CLOSE_CODES } from "../../protocol/codec.ts";
import { MAX_VERSION_ORDINAL } from "../../protocol/messages.ts";
import { oraclePolicy } from "../../src/llm/builtin.ts";
import type { Policy } from "../../src/llm/policy.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { VersionedPolicy } from "../helpers/versioned-policy.ts";
import { type Frame, playToVerdict, rolloutFrame, TestClient, until } from "../helpers/ws-client.ts";

const TRAINER = { type: "hello", protocol: 1, client: "trainer", role: "trainer" };

async function serve(policy: Policy, extra: Parameters<typeof buildServer>[0] = {}) {
  const server = await buildServer({ policy, maxBufferedGroups: 2, resumeGraceMs: 300, ...extra });
  return { server, url: await server.listen(0, "127.0.0.1") };
}

/** `server`'s /metrics text, through fastify's inject (no socket needed). */
async function metricsOf(server: RollgymServer): Promise<string> {
  return (await server.app.inject({ method: "GET", url: "/metrics" })).body;
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
    expect(ended).toEqual({
      type: "update_ended",
      id: "u1",
      version: { label: "step-1", ordinal: 1 },
      failed_to_resume: [],
    });
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
    const metrics = await metricsOf(server);
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
    expect(successor.of("welcome")[0].update).not.toHaveProperty("version");
    await ask(
      successor,
      { type: "end_update", id: "u", version: { label: "s1", ordinal: 1 } },
      "update_ended",
    );
    successor.close();
    await server.shutdown();
  });

  it("a successor's welcome names the version its predecessor announced at begin_update", async () => {
    const policy = new VersionedPolicy();
    const { server, url } = await serve(policy, { resumeGraceMs: 60_000 });
    const old = await TestClient.connect(url, { hello: TRAINER });
    const version = { label: "step-7", ordinal: 7 };
    await ask(old, { type: "begin_update", id: "u", version }, "update_begun");
    old.ws.terminate();
    await old.closed();
    await until(() => server.state.updates.trainer?.outbound === null);
    const successor = await TestClient.connect(url, { hello: TRAINER });
    expect(successor.of("welcome")[0]).toMatchObject({ update: { id: "u", begun: true, version } });
    await ask(successor, { type: "end_update", id: "u", version }, "update_ended");
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

/** Begins update `id` and ends it as version `label` with `ordinal`; resolves to the answer to the end. */
async function bracket(trainer: TestClient, id: string, label: string, ordinal: number): Promise<Frame> {
  await ask(trainer, { type: "begin_update", id }, "update_begun");
  return ask(trainer, { type: "end_update", id, version: { label, ordinal } }, "update_ended", "error");
}

/** A bystander's stream rollout of `groups` groups, acknowledged as they come: resolves to its batch frame. */
function bystanderRollout(bystander: TestClient, id: string, groups: number): Promise<Frame> {
  return playToVerdict(bystander, rolloutFrame(id, groups, 2, { delivery: "stream" }));
}

describe("bounded ordinals (issue #28)", () => {
  it("the 2⁵³−1 ordinal is refused naming the maximum; the update stays open, later updates complete, a bystander's rollout too", async () => {
    // The built-in policy's own version book, as `rollgym serve` runs it.
    const { server, url } = await serve(oraclePolicy());
    const trainer = await TestClient.connect(url, { hello: TRAINER });
    const bystander = await TestClient.connect(url);
    await ask(trainer, { type: "begin_update", id: "u1" }, "update_begun");
    const verdict = bystanderRollout(bystander, "r", 6);

    const huge = await ask(
      trainer,
      { type: "end_update", id: "u1", version: { label: "huge", ordinal: 2 ** 53 - 1 } },
      "update_ended",
      "error",
    );
    expect(huge).toMatchObject({ type: "error", code: "update", field: "version.ordinal" });
    expect(huge.message).toBe(
      `version.ordinal: got ${2 ** 53 - 1}, must be at most ${MAX_VERSION_ORDINAL} (token_versions_i32 carries ordinals as int32); update "u1" stays open`,
    );
    expect(server.state.updates.closed).toBe(true);

    // Corrected, and the next update after it, end as usual.
    const ended = await ask(
      trainer,
      { type: "end_update", id: "u1", version: { label: "step-1", ordinal: 1 } },
      "update_ended",
      "error",
    );
    expect(ended).toEqual({
      type: "update_ended",
      id: "u1",
      version: { label: "step-1", ordinal: 1 },
      failed_to_resume: [],
    });
    expect(await bracket(trainer, "u2", "step-2", 2)).toMatchObject({
      type: "update_ended",
      version: { label: "step-2", ordinal: 2 },
    });
    expect(await verdict).toMatchObject({ type: "batch", rollout: "r", episodes: 12, failed: 0 });
    expect(server.state.updates.closed).toBe(false);
    bystander.close();
    trainer.close();
    await server.shutdown();
  });

  it("an ordinal past any integer the wire can carry is refused the same way", async () => {
    const { server, url } = await serve(new VersionedPolicy());
    const trainer = await TestClient.connect(url, { hello: TRAINER });
    await ask(trainer, { type: "begin_update", id: "u" }, "update_begun");
    const refused = await ask(
      trainer,
      { type: "end_update", id: "u", version: { label: "x", ordinal: 2 ** 64 } },
      "error",
    );
    expect(refused).toMatchObject({ code: "update", field: "version.ordinal" });
    expect(refused.message).toContain(`must be at most ${MAX_VERSION_ORDINAL}`);
    expect(
      await ask(
        trainer,
        { type: "end_update", id: "u", version: { label: "s1", ordinal: 1 } },
        "update_ended",
      ),
    ).toMatchObject({ version: { ordinal: 1 } });
    trainer.close();
    await server.shutdown();
  });

  it("at the maximum ordinal, begin_update is refused and the engines are never paused", async () => {
    const { server, url } = await serve(oraclePolicy());
    const trainer = await TestClient.connect(url, { hello: TRAINER });
    const bystander = await TestClient.connect(url);
    expect(await bracket(trainer, "last", "final", MAX_VERSION_ORDINAL)).toMatchObject({
      type: "update_ended",
      version: { label: "final", ordinal: MAX_VERSION_ORDINAL },
    });
    const refused = await ask(trainer, { type: "begin_update", id: "next" }, "update_begun", "error");
    expect(refused).toMatchObject({ type: "error", code: "update" });
    expect(refused.message).toBe(
      `begin_update "next": the version in force, "final", has ordinal ${MAX_VERSION_ORDINAL}, the maximum; no end_update could name a greater one, so no update begins (the engines keep running)`,
    );
    expect(server.state.updates.closed).toBe(false);
    expect(await bystanderRollout(bystander, "r", 3)).toMatchObject({ type: "batch", failed: 0 });
    bystander.close();
    trainer.close();
    await server.shutdown();
  });
});

describe("begin_update announces the version (issue #30)", () => {
  it("a stale start is refused at begin_update, before any engine pauses, naming the field, the current version and what is allowed", async () => {
    const policy = new VersionedPolicy();
    const { server, url } = await serve(policy);
    const trainer = await TestClient.connect(url, { hello: TRAINER });
    // An earlier trainer moved the server to version 3.
    for (const n of [1, 2, 3]) await bracket(trainer, `earlier-${n}`, `step-${n}`, n);
    expect(policy.begun).toHaveLength(3);

    // A trainer counting from 0 announces step-1.
    const stale = await ask(
      trainer,
      { type: "begin_update", id: "u", version: { label: "step-1", ordinal: 1 } },
      "update_begun",
      "error",
    );
    expect(stale).toMatchObject({ type: "error", code: "update", field: "version.ordinal" });
    expect(stale.message).toBe(
      `version.ordinal: got 1, must be greater than the current 3 ("step-3") and at most ${MAX_VERSION_ORDINAL}; begin_update "u" is refused before any engine paused: count on from the version in force (the trainer's welcome and every update_ended name it)`,
    );
    const equal = await ask(
      trainer,
      { type: "begin_update", id: "u", version: { label: "again", ordinal: 3 } },
      "update_begun",
      "error",
    );
    expect(equal).toMatchObject({ code: "update", field: "version.ordinal" });
    const huge = await ask(
      trainer,
      { type: "begin_update", id: "u", version: { label: "huge", ordinal: 2 ** 53 - 1 } },
      "update_begun",
      "error",
    );
    expect(huge).toMatchObject({ code: "update", field: "version.ordinal" });
    expect(huge.message).toContain(`must be at most ${MAX_VERSION_ORDINAL}`);
    expect(huge.message).toContain('begin_update "u" is refused before any engine paused');
    // Nothing was paused, admission stayed open, the version is unchanged.
    expect(policy.begun).toHaveLength(3);
    expect(server.state.updates.closed).toBe(false);
    expect(policy.current).toEqual({ label: "step-3", ordinal: 3 });

    // Counted on from the version in force, the same id begins and ends.
    const begun = await ask(
      trainer,
      { type: "begin_update", id: "u", version: { label: "step-4", ordinal: 4 } },
      "update_begun",
      "error",
    );
    expect(begun).toMatchObject({ type: "update_begun", id: "u", version: { label: "step-3", ordinal: 3 } });
    expect(
      await ask(
        trainer,
        { type: "end_update", id: "u", version: { label: "step-4", ordinal: 4 } },
        "update_ended",
      ),
    ).toEqual({
      type: "update_ended",
      id: "u",
      version: { label: "step-4", ordinal: 4 },
      failed_to_resume: [],
    });
    trainer.close();
    await server.shutdown();
  });

  it("end_update must name the announced version; a mismatch names both and the update stays open", async () => {
    const policy = new VersionedPolicy();
    const { server, url } = await serve(policy);
    const trainer = await TestClient.connect(url, { hello: TRAINER });
    await ask(
      trainer,
      { type: "begin_update", id: "u", version: { label: "step-1", ordinal: 1 } },
      "update_begun",
    );
    for (const version of [
      { label: "step-2", ordinal: 2 },
      { label: "other", ordinal: 1 },
    ]) {
      const refused = await ask(trainer, { type: "end_update", id: "u", version }, "update_ended", "error");
      expect(refused).toMatchObject({ type: "error", code: "update", field: "version" });
      expect(refused.message).toBe(
        `end_update "u": version ${JSON.stringify(version.label)} (ordinal ${version.ordinal}) is not the one its begin_update announced, "step-1" (ordinal 1); update "u" stays open: end it with the announced version`,
      );
      expect(server.state.updates.closed).toBe(true);
    }
    expect(policy.ended).toHaveLength(0);
    expect(
      await ask(
        trainer,
        { type: "end_update", id: "u", version: { label: "step-1", ordinal: 1 } },
        "update_ended",
      ),
    ).toMatchObject({ version: { label: "step-1", ordinal: 1 } });
    trainer.close();
    await server.shutdown();
  });

  it("a begin_update without a version is checked at end_update as before, the open update's id named", async () => {
    const { server, url } = await serve(new VersionedPolicy());
    const trainer = await TestClient.connect(url, { hello: TRAINER });
    await bracket(trainer, "first", "step-1", 1);
    await ask(trainer, { type: "begin_update", id: "u" }, "update_begun");
    const stale = await ask(
      trainer,
      { type: "end_update", id: "u", version: { label: "step-1", ordinal: 1 } },
      "error",
    );
    expect(stale.message).toBe(
      `version.ordinal: got 1, must be greater than the current 1 ("step-1") and at most ${MAX_VERSION_ORDINAL}; update "u" stays open`,
    );
    expect(server.state.updates.closed).toBe(true);
    trainer.close();
    await server.shutdown();
  });

  it("an announced version is schema-checked like end_update's", async () => {
    const { server, url } = await serve(new VersionedPolicy());
    const trainer = await TestClient.connect(url, { hello: TRAINER });
    const negative = await ask(
      trainer,
      { type: "begin_update", id: "u", version: { label: "x", ordinal: -1 } },
      "update_begun",
      "error",
    );
    expect(negative).toMatchObject({ code: "bad_frame", field: "version.ordinal" });
    const empty = await ask(
      trainer,
      { type: "begin_update", id: "u", version: { label: "", ordinal: 1 } },
      "update_begun",
      "error",
    );
    expect(empty).toMatchObject({ code: "bad_frame", field: "version.label" });
    expect(server.state.updates.closed).toBe(false);
    trainer.close();
    await server.shutdown();
  });
});

describe("max_update_s: an update left open too long", () => {
  it("ends at the old version: admission reopens, the trainer is told, a late end_update is refused", async () => {
    const policy = new VersionedPolicy();
    const { server, url } = await serve(policy, { maxUpdateMs: 300 });
    const trainer = await TestClient.connect(url, { hello: TRAINER });
    const bystander = await TestClient.connect(url);
    // Only a trainer's welcome names the limit: other clients see the bytes they always did.
    expect(trainer.of("welcome")[0].limits).toMatchObject({ max_update_s: 0.3 });
    expect(bystander.of("welcome")[0].limits).not.toHaveProperty("max_update_s");

    await ask(trainer, { type: "begin_update", id: "slow" }, "update_begun");
    const verdict = bystanderRollout(bystander, "r", 4);
    const told = await trainer.next((f) => f.type === "error");
    expect(told).toEqual({
      type: "error",
      code: "update",
      message:
        'update "slow" expired: it stayed open longer than max_update_s (0.3 s) without end_update, so the engines resumed at the old version "initial" (ordinal 0) and admission reopened; begin a new update',
      field: "max_update_s",
    });
    expect(server.state.updates.closed).toBe(false);
    expect(policy.ended).toEqual([{ label: "initial", ordinal: 0 }]);
    expect(await verdict).toMatchObject({ type: "batch", episodes: 8, failed: 0 });
    const metrics = await metricsOf(server);
    expect(metrics).toMatch(/^rollgym_weight_updates_total\{outcome="expired"\} 1$/m);

    const late = await ask(
      trainer,
      { type: "end_update", id: "slow", version: { label: "step-1", ordinal: 1 } },
      "update_ended",
      "error",
    );
    expect(late).toMatchObject({ type: "error", code: "update", field: "max_update_s" });
    expect(late.message).toMatch(/^end_update "slow": update "slow" expired: /);
    // The next update starts from the old version and ends as usual.
    await ask(trainer, { type: "begin_update", id: "again" }, "update_begun");
    expect(
      await ask(
        trainer,
        { type: "end_update", id: "again", version: { label: "step-1", ordinal: 1 } },
        "update_ended",
      ),
    ).toMatchObject({ version: { label: "step-1", ordinal: 1 } });
    bystander.close();
    trainer.close();
    await server.shutdown();
  });
});

describe("a handler that throws", () => {
  it("fails its frame on its connection, never the process: the server serves on", async () => {
    const versioned = new VersionedPolicy();
    // A begin() whose answer cannot be encoded: the throw comes from sending update_begun.
    const broken: Policy = {
      name: "broken-answers",
      generate: (request) => versioned.generate(request),
      updates: () => {
        const updates = versioned.updates();
        return {
          get current() {
            return updates.current;
          },
          get updating() {
            return updates.updating;
          },
          begin: async (mode) => ({ ...(await updates.begin(mode)), in_flight: 1n as unknown as number }),
          end: (version) => updates.end(version),
        };
      },
    };
    const { server, url } = await serve(broken);
    const trainer = await TestClient.connect(url, { hello: TRAINER });
    const bystander = await TestClient.connect(url);
    const failed = await ask(trainer, { type: "begin_update", id: "u" }, "update_begun", "error");
    expect(failed).toMatchObject({ type: "error", code: "internal" });
    expect(failed.message).toContain("BigInt");
    // The update did begin; the trainer ends it and everyone goes on.
    await ask(trainer, { type: "end_update", id: "u", version: { label: "s1", ordinal: 1 } }, "update_ended");
    expect(await bystanderRollout(bystander, "r", 2)).toMatchObject({ type: "batch", failed: 0 });
    expect((await server.app.inject({ method: "GET", url: "/healthz" })).statusCode).toBe(200);
    bystander.close();
    trainer.close();
    await server.shutdown();
  });
});

describe("the trainer token", () => {
  const TOKEN = "trainer-secret-7f3a";
  let server: RollgymServer;
  let url: string;

  beforeAll(async () => {
    ({ server, url } = await serve(new VersionedPolicy(), { trainerToken: TOKEN }));
  });
  afterAll(async () => {
    await server.shutdown();
  });

  /** A hello claiming the role with `extra`: resolves to its error frame and close code. */
  async function refusedHello(
    extra: Record<string, unknown>,
  ): Promise<{ error: Frame; code: number | null }> {
    const client = await TestClient.connect(url, { hello: { ...TRAINER, ...extra } });
    await client.closed();
    expect(client.of("welcome")).toEqual([]);
    return { error: client.of("error")[0], code: client.closeCode };
  }

  it("a hello claiming the role without it, or with another, is refused (close 4004)", async () => {
    const missing = await refusedHello({});
    expect(missing.code).toBe(CLOSE_CODES.trainerToken);
    expect(missing.error).toEqual({
      type: "error",
      code: "not_trainer",
      message:
        'hello role "trainer": this server reserves the trainer role; send its trainer token as hello.trainer_token',
      field: "trainer_token",
    });
    for (const wrong of [`${TOKEN}x`, TOKEN.slice(0, -1), "a"]) {
      const refused = await refusedHello({ trainer_token: wrong });
      expect(refused.code).toBe(4004);
      expect(refused.error).toMatchObject({ code: "not_trainer", field: "trainer_token" });
      expect(refused.error.message).toBe(
        'hello role "trainer": trainer_token is not this server\'s trainer token',
      );
    }
    expect(server.state.updates.trainer).toBeNull();
  });

  it("with it, the session is the trainer; other clients need none and are not affected", async () => {
    const trainer = await TestClient.connect(url, { hello: { ...TRAINER, trainer_token: TOKEN } });
    expect(trainer.of("welcome")[0]).toMatchObject({ version: { label: "initial" } });
    const player = await TestClient.connect(url);
    expect(player.of("welcome")).toHaveLength(1);
    expect(await bracket(trainer, "u", "step-1", 1)).toMatchObject({ type: "update_ended" });
    expect(await playToVerdict(player, rolloutFrame("r", 2, 2))).toMatchObject({ type: "batch", failed: 0 });
    expect(await ask(player, { type: "begin_update", id: "x" }, "error")).toMatchObject({
      code: "not_trainer",
    });

    // Claiming the role on a resume needs the token too.
    const session = trainer.of("welcome")[0].session;
    trainer.ws.terminate();
    await until(() => server.state.updates.trainer?.outbound === null);
    const resumed = await refusedHello({ resume: session });
    expect(resumed.code).toBe(4004);
    const back = await TestClient.connect(url, {
      hello: { ...TRAINER, resume: session, trainer_token: TOKEN },
    });
    expect(back.of("welcome")[0]).toMatchObject({ resumed: true, version: { label: "step-1", ordinal: 1 } });
    back.close();
    player.close();
  });

  it("a server without one takes a hello that carries one, as it takes any trainer", async () => {
    const open = await serve(new VersionedPolicy());
    const trainer = await TestClient.connect(open.url, { hello: { ...TRAINER, trainer_token: "anything" } });
    expect(trainer.of("welcome")[0]).toMatchObject({ version: { label: "initial" } });
    trainer.close();
    await open.server.shutdown();
  });
});
