// Issue #30's acceptance for misbehaving engines, over the real protocol: a trainer brackets
// updates while another client's rollout plays against two mock vLLM engines, one of which
// refuses a /pause, fails a /resume once, and is killed mid-update. The trainer reads each
// failure in update_begun.refused / update_ended.failed_to_resume; no request reaches a paused
// engine outside an update (the engines' own count); no episode fails. When every replica
// refuses, begin_update fails with admission open and nothing paused.
import { afterEach, describe, expect, it } from "vitest";
import { ChatPolicy } from "../../src/llm/openai-chat.ts";
import { DEFAULT_MODEL, type MockEngine, startMockEngine } from "../../src/mock-engine/server.ts";
import { buildServer } from "../../src/server/app.ts";
import { type Frame, playToVerdict, rolloutFrame, TestClient, until } from "../helpers/ws-client.ts";

const TRAINER = { type: "hello", protocol: 1, client: "trainer", role: "trainer" };

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  for (const x of open.splice(0).reverse()) await x.close();
});

/** A server whose policy routes to `replicas` mock engines, a trainer and a player connected. */
async function serveOn(replicas: number) {
  const mocks: MockEngine[] = [];
  for (let i = 0; i < replicas; i++) {
    const mock = await startMockEngine({ tpotMs: 10 });
    open.push(mock);
    mocks.push(mock);
  }
  const policy = new ChatPolicy({
    baseURL: mocks.map((m) => m.url),
    model: DEFAULT_MODEL,
    backoffMs: 20,
    concurrency: 4,
  });
  await policy.preflight();
  open.push(policy);
  const server = await buildServer({ policy, groupConcurrency: 4 });
  const url = await server.listen(0, "127.0.0.1");
  open.push({ close: async () => void (await server.shutdown()) });
  const trainer = await TestClient.connect(url, { hello: TRAINER });
  const player = await TestClient.connect(url);
  open.push({
    close: async () => {
      trainer.close();
      player.close();
    },
  });
  return { mocks, policy, server, trainer, player };
}

/** Sends `frame` and resolves to the answer of one of `types` that follows it. */
async function ask(client: TestClient, frame: Frame, ...types: string[]): Promise<Frame> {
  const from = client.received.length;
  client.send(frame);
  return client.next((f) => types.includes(f.type) && client.received.indexOf(f) >= from);
}

describe("weight updates with misbehaving engines, over the protocol", () => {
  it("a refused pause, a resume that fails once, a replica killed mid-update: the trainer is told, no episode fails, no request reaches a paused engine", async () => {
    const { mocks, policy, trainer, player } = await serveOn(2);
    const [a, b] = mocks;
    const arrivedWhilePaused = () => mocks.reduce((sum, m) => sum + m.stats().arrivedWhilePaused, 0);
    let outsideUpdates = 0;
    let mark = arrivedWhilePaused();
    /** One bracket; `during` runs once update_begun is in. Arrivals at a paused engine are counted between brackets. */
    const bracket = async (id: string, ordinal: number, during: () => void = () => {}) => {
      outsideUpdates += arrivedWhilePaused() - mark;
      const begun = await ask(trainer, { type: "begin_update", id, mode: "keep" }, "update_begun", "error");
      during();
      const ended = await ask(
        trainer,
        { type: "end_update", id, version: { label: id, ordinal } },
        "update_ended",
        "error",
      );
      mark = arrivedWhilePaused();
      return { begun, ended };
    };

    const verdict = playToVerdict(player, rolloutFrame("r", 32, 2, { max_turn: 3 }));
    const bothBusy = () => until(() => a.stats().running > 0 && b.stats().running > 0);
    await bothBusy();

    a.refusePause("CUDA out of memory");
    const refused = await bracket("u1", 1, () => a.refusePause(null));
    expect(refused.begun).toMatchObject({
      type: "update_begun",
      paused: 1,
      out_of_routing: [a.url],
      refused: [
        { url: a.url, reason: expect.stringContaining("Failed to pause generation: CUDA out of memory") },
      ],
    });
    expect(refused.ended).toMatchObject({ type: "update_ended", failed_to_resume: [] });
    await until(() => policy.replicas().every((r) => r.healthy));

    await bothBusy();
    b.failResume(1);
    const retried = await bracket("u2", 2);
    expect(retried.begun).toMatchObject({ paused: 2, refused: [] });
    expect(retried.ended).toMatchObject({ type: "update_ended", failed_to_resume: [] });
    expect(b.isPaused()).toBe(false);

    await bothBusy();
    let killedRunning = 0;
    const killed = await bracket("u3", 3, () => {
      killedRunning = a.stats().running;
      a.setOutage("reset");
    });
    expect(killed.begun).toMatchObject({ paused: 2, refused: [] });
    expect(killed.ended).toMatchObject({
      type: "update_ended",
      version: { label: "u3", ordinal: 3 },
      failed_to_resume: [{ url: a.url, reason: expect.stringContaining("connection error") }],
    });
    // Its frozen requests were continued on the other replica.
    expect(killedRunning).toBeGreaterThan(0);
    // It restarts (unpaused) and its probe brings it back.
    a.resume();
    a.setOutage(null);
    await until(() => policy.replicas().every((r) => r.healthy));

    const batch = await verdict;
    expect(batch).toMatchObject({ type: "batch", failed: 0, failed_groups: [] });
    outsideUpdates += arrivedWhilePaused() - mark;
    expect(outsideUpdates).toBe(0);
    expect(mocks.map((m) => m.isPaused())).toEqual([false, false]);
  }, 60_000);

  it("every replica refuses: begin_update fails with the reasons, admission reopens, nothing is left paused, the rollout plays on", async () => {
    const { mocks, server, trainer, player } = await serveOn(1);
    const [mock] = mocks;
    const verdict = playToVerdict(player, rolloutFrame("r", 4, 2, { max_turn: 2 }));
    await until(() => mock.stats().running > 0);
    mock.refusePause("CUDA out of memory");
    const error = await ask(trainer, { type: "begin_update", id: "u1" }, "update_begun", "error");
    expect(error).toMatchObject({ type: "error", code: "update" });
    expect(error.message).toMatch(
      /^begin_update "u1": pausing the engines failed: no replica paused: .* refused \(.*Failed to pause generation: CUDA out of memory\); admission is open again/,
    );
    expect(server.state.updates.closed).toBe(false);
    expect(mock.isPaused()).toBe(false);
    mock.refusePause(null);
    expect(await verdict).toMatchObject({ type: "batch", failed: 0, failed_groups: [] });
    // The next update goes through.
    expect(await ask(trainer, { type: "begin_update", id: "u2" }, "update_begun", "error")).toMatchObject({
      type: "update_begun",
      paused: 1,
    });
  });
});
