// begin_update's `engines: "held_elsewhere"` over real WebSockets on 127.0.0.1:0 (docs/ray.md
// "Weight updates"): two servers share one mock engine, as shards do. The follower's update
// closes its admission and moves its version but asks the engine nothing (the mock's own
// counts); the lead's update pauses and resumes it once. The follower's turns are stamped as the
// engine's record of which weights made their tokens says. A bad value is refused naming the field.
import { afterEach, describe, expect, it } from "vitest";
import { ChatPolicy } from "../../src/llm/openai-chat.ts";
import { DEFAULT_MODEL, type MockEngine, startMockEngine } from "../../src/mock-engine/server.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { ordinalOf } from "../helpers/engine-versions.ts";
import { type Frame, playToVerdict, rolloutFrame, TestClient, until } from "../helpers/ws-client.ts";

const TRAINER = { type: "hello", protocol: 1, client: "trainer", role: "trainer" };
const STEP_1 = { label: "step-1", ordinal: 1 };

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  for (const x of open.splice(0).reverse()) await x.close();
});

/** A server routing to `engine`, with a trainer connected. */
async function serveOn(
  engine: MockEngine,
): Promise<{ server: RollgymServer; url: string; trainer: TestClient }> {
  const policy = new ChatPolicy({ baseURL: engine.url, model: DEFAULT_MODEL, backoffMs: 20, concurrency: 8 });
  await policy.preflight();
  open.push(policy);
  const server = await buildServer({ policy, groupConcurrency: 4 });
  const url = await server.listen(0, "127.0.0.1");
  open.push({ close: async () => void (await server.shutdown()) });
  const trainer = await TestClient.connect(url, { hello: TRAINER });
  open.push({ close: async () => trainer.close() });
  return { server, url, trainer };
}

/** Sends `frame` and resolves to the answer of one of `types` that follows it. */
async function ask(client: TestClient, frame: Frame, ...types: string[]): Promise<Frame> {
  const from = client.received.length;
  client.send(frame);
  return client.next((f) => types.includes(f.type) && client.received.indexOf(f) >= from);
}

/** The engine requests that pause, resume or label it, by route (the mock's own count). */
function controlRequests(engine: MockEngine): Record<string, number> {
  const byRoute = engine.stats().requestsByRoute;
  return Object.fromEntries(
    ["/pause", "/resume", "/is_paused", "/update_weight_version"].map((r) => [r, byRoute[r] ?? 0]),
  );
}

describe('begin_update with engines: "held_elsewhere"', () => {
  it("a follower closes admission and moves its version without an engine request; the lead pauses the shared engine once; the follower's stamps are the engine's", async () => {
    const engine = await startMockEngine({ tpotMs: 10 });
    open.push(engine);
    const lead = await serveOn(engine);
    const follower = await serveOn(engine);
    const player = await TestClient.connect(follower.url);
    open.push({ close: async () => player.close() });

    const verdict = playToVerdict(player, rolloutFrame("r", 8, 2, { max_turn: 3, delivery: "stream" }));
    await until(() => engine.stats().running > 0);
    const before = controlRequests(engine);

    // The follower first: admission closed, nothing asked of the engine.
    const begun = await ask(
      follower.trainer,
      { type: "begin_update", id: "u1", mode: "keep", version: STEP_1, engines: "held_elsewhere" },
      "update_begun",
      "error",
    );
    expect(begun).toMatchObject({
      type: "update_begun",
      id: "u1",
      version: { label: "initial", ordinal: 0 },
      engines: "held_elsewhere",
      paused: 0,
      aborted: 0,
      out_of_routing: [],
      refused: [],
    });
    expect(follower.server.state.updates.closed).toBe(true);
    expect(engine.isPaused()).toBe(false);

    // Then the lead pauses it (keep: the follower's requests freeze half-way) and weights load.
    const leadBegun = await ask(
      lead.trainer,
      { type: "begin_update", id: "u1", mode: "keep" },
      "update_begun",
    );
    expect(leadBegun).toMatchObject({ paused: 1 });
    expect(leadBegun).not.toHaveProperty("engines");
    engine.loadWeights("step-1");

    // The follower ends while the engine is still paused; the lead resumes it.
    const ended = await ask(
      follower.trainer,
      { type: "end_update", id: "u1", version: STEP_1 },
      "update_ended",
      "error",
    );
    expect(ended).toEqual({
      type: "update_ended",
      id: "u1",
      version: STEP_1,
      engines: "held_elsewhere",
      failed_to_resume: [],
    });
    expect(follower.server.state.updates.closed).toBe(false);
    expect(engine.isPaused()).toBe(true);
    const leadEnded = await ask(
      lead.trainer,
      { type: "end_update", id: "u1", version: STEP_1 },
      "update_ended",
    );
    expect(leadEnded).not.toHaveProperty("engines");

    const batch = await verdict;
    expect(batch).toMatchObject({ type: "batch", failed: 0 });
    // One pause and one resume, both the lead's: the follower sent the engine none of these.
    expect(engine.stats()).toMatchObject({ pauses: 1, resumes: 1 });
    const after = controlRequests(engine);
    expect(after["/pause"] - before["/pause"]).toBe(1);
    expect(after["/resume"] - before["/resume"]).toBe(1);
    const metrics = await (await fetch(`${engine.url.replace(/\/v1$/, "")}/metrics`)).text();
    expect(metrics).toMatch(/^mock_engine:pauses_total\{[^}]*\} 1$/m);
    expect(metrics).toMatch(/^mock_engine:resumes_total\{[^}]*\} 1$/m);

    // Each turn of the follower's episodes is one engine request (keep mode interrupts none),
    // the session's requests in the order they began: the ordinals that made its tokens lie
    // within the turn's stamp, and some turns span the update.
    const records = engine.generations();
    let spanning = 0;
    let turns = 0;
    for (const group of player.of("group").filter((f) => f.rollout === "r")) {
      for (const episode of group.episodes as {
        env_id: number;
        turns: { version: { dispatch: number; completion: number } }[];
      }[]) {
        const mine = records
          .filter((r) => r.session?.endsWith(`:${episode.env_id}`))
          .sort((a, b) => a.started - b.started);
        expect(mine).toHaveLength(episode.turns.length);
        episode.turns.forEach(({ version }, i) => {
          const made = new Set(mine[i].versions.map(ordinalOf));
          for (const ordinal of made) {
            expect(ordinal).toBeGreaterThanOrEqual(version.dispatch);
            expect(ordinal).toBeLessThanOrEqual(version.completion);
          }
          if (made.size === 2) {
            expect(version).toEqual({ dispatch: 0, completion: 1 });
            spanning++;
          }
          turns++;
        });
      }
    }
    expect(turns).toBeGreaterThan(0);
    expect(spanning).toBeGreaterThan(0);
  }, 60_000);

  it("ends at the version in force when the lead could not pause (nothing moved); a bad value is refused naming the field", async () => {
    const engine = await startMockEngine({});
    open.push(engine);
    const { server, trainer } = await serveOn(engine);

    const bad = await ask(
      trainer,
      { type: "begin_update", id: "u1", engines: "nobody" },
      "update_begun",
      "error",
    );
    expect(bad).toMatchObject({ type: "error", code: "bad_frame", field: "engines" });
    expect(bad.message).toContain("held_elsewhere");
    expect(server.state.updates.closed).toBe(false);

    const begun = await ask(
      trainer,
      { type: "begin_update", id: "u2", version: STEP_1, engines: "held_elsewhere" },
      "update_begun",
    );
    expect(begun).toMatchObject({ engines: "held_elsewhere", version: { label: "initial", ordinal: 0 } });
    // Back to where it was: admission reopens, the version stays.
    const ended = await ask(
      trainer,
      { type: "end_update", id: "u2", version: { label: "initial", ordinal: 0 } },
      "update_ended",
      "error",
    );
    expect(ended).toMatchObject({
      type: "update_ended",
      version: { label: "initial", ordinal: 0 },
      engines: "held_elsewhere",
    });
    expect(server.state.updates.closed).toBe(false);
    expect(engine.stats()).toMatchObject({ pauses: 0, resumes: 0 });
    expect(controlRequests(engine)).toEqual({
      "/pause": 0,
      "/resume": 0,
      "/is_paused": 0,
      "/update_weight_version": 0,
    });

    // An update the server pauses itself still may not end at the version in force.
    await ask(trainer, { type: "begin_update", id: "u3" }, "update_begun");
    const refused = await ask(
      trainer,
      { type: "end_update", id: "u3", version: { label: "initial", ordinal: 0 } },
      "update_ended",
      "error",
    );
    expect(refused).toMatchObject({ type: "error", code: "update", field: "version.ordinal" });
    await ask(trainer, { type: "end_update", id: "u3", version: STEP_1 }, "update_ended");
    expect(engine.stats()).toMatchObject({ pauses: 1, resumes: 1 });
  }, 30_000);
});
