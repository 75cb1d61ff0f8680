// rollgym hosting a remote OpenEnv environment (env_type openenv), end to end: one rollgym
// serves its CoordSokoban under /openenv, a second registry hosts it as a custom tag, and a
// batch rolled out on the remote tag equals the same batch on the in-process tag, seed for
// seed, turn by turn (states, actions, rewards, success, scores).
import { afterEach, describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import { randomPolicy } from "../../src/llm/builtin.ts";
import type { Policy } from "../../src/llm/policy.ts";
import type { EpisodeRecord } from "../../src/record/episode-record.ts";
import { openenvPool } from "../../src/remote-envs/openenv-remote.ts";
import { runBatch } from "../../src/rollout/batch.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { remoteRegistry } from "../helpers/openenv-remote.ts";
import { TestClient } from "../helpers/ws-client.ts";

let server: RollgymServer | null = null;
afterEach(async () => {
  await server?.shutdown();
  server = null;
});

/** A registry with RemoteSokoban: CoordSokoban's tag spec, its env on `base`. */
function remoteSokoban(base: string, envConfig: Record<string, unknown> = {}) {
  return remoteRegistry("RemoteSokoban", "CoordSokoban", {
    url: base,
    max_sessions: 64,
    actions: ["Up", "Down", "Left", "Right"],
    ...envConfig,
  });
}

/** What must match between an in-process and a remote episode (the tag name aside). */
function played(e: EpisodeRecord) {
  return {
    seed: e.seed,
    env_id: e.env_id,
    turns: e.turns.map((t) => ({
      state: t.state,
      actions: t.actions,
      reward: t.reward,
      reward_text: t.reward_text,
      success: t.info.success,
      format_penalty: t.format_penalty,
    })),
    final_state: e.final_state,
    success: e.success,
    reward: e.reward,
    score: e.score,
    end_reason: e.end_reason,
    failure: e.failure,
  };
}

describe("env_type openenv: a remote CoordSokoban", () => {
  it("rolls out groups identical to the in-process tag, seed for seed", async () => {
    server = await buildServer({});
    const base = `${await server.listen()}/openenv/CoordSokoban`;
    const registry = await remoteSokoban(base);
    const batch = (tag: string) =>
      defaultBatchRequest("train", { tags: [{ tag, groups: 6 }], groupSize: 4, seed: 4242 });
    const policy = randomPolicy({ noise: 0.2, malformed: 0.1 });
    const local = await runBatch(createRegistry(), batch("CoordSokoban"), policy);
    const remote = await runBatch(registry, batch("RemoteSokoban"), policy);

    expect(remote.failed).toBe(0);
    expect(remote.episodes.map(played)).toEqual(local.episodes.map(played));
    // A real game was played: moves, rewards, some ends.
    expect(remote.episodes.flatMap((e) => e.turns).length).toBeGreaterThan(24);
    expect(new Set(remote.episodes.map((e) => e.seed)).size).toBe(6);
    expect(remote.groups.map((g) => g.kept)).toEqual(local.groups.map((g) => g.kept));
    // Every session was given back.
    expect(openenvPool(registry.tag("RemoteSokoban").config)?.counts).toMatchObject({ open: 0, waiting: 0 });
  });

  it("holds no more sessions than max_sessions, the others waiting their turn", async () => {
    server = await buildServer({});
    const base = `${await server.listen()}/openenv/CoordSokoban`;
    const registry = await remoteSokoban(base, { max_sessions: 3 });
    const pool = () => openenvPool(registry.tag("RemoteSokoban").config)!;
    let most = 0;
    const result = await runBatch(
      registry,
      defaultBatchRequest("train", { tags: [{ tag: "RemoteSokoban", groups: 4 }], groupSize: 4, seed: 7 }),
      randomPolicy(),
      { onTurn: () => (most = Math.max(most, pool().counts.open)) },
    );
    expect(result.failed).toBe(0);
    expect(result.episodes).toHaveLength(16);
    expect(most).toBeGreaterThan(0);
    expect(most).toBeLessThanOrEqual(3);
  });

  it("an env_open wanting more sessions than the tag holds answers within capacity_wait_s, naming why", async () => {
    // Episodes of an env_open keep their sessions until stepped, and steps come only after
    // env_opened: the ones without a session must fail instead of waiting for ever.
    server = await buildServer({});
    const base = `${await server.listen()}/openenv/CoordSokoban`;
    const registry = await remoteSokoban(base, { max_sessions: 2, capacity_wait_s: 1 });
    const host = await buildServer({ registry });
    try {
      const client = await TestClient.connect(await host.listen());
      client.send({ type: "env_open", id: "h", tag: "RemoteSokoban", groups: 2, group_size: 2, seed: 5 });
      const answer = await client.next((f) => f.type === "env_opened" || f.type === "error");
      expect(answer.type).toBe("env_opened");
      client.send({ type: "env_close", id: "h" });
      const closed = await client.next((f) => f.type === "env_closed");
      const failures = (closed.episodes as EpisodeRecord[]).map((e) => e.failure);
      expect(failures.filter((f) => f === null)).toHaveLength(2);
      for (const failure of failures.filter((f) => f !== null))
        expect(failure).toMatch(/openenv_capacity: no session of the tag's 2 .*capacity_wait_s \(1 s\)/);
      client.ws.terminate();
    } finally {
      await host.shutdown();
    }
  });

  it("env hosting (the trainer owns inference) plays a remote tag as it plays the in-process one", async () => {
    server = await buildServer({});
    const base = `${await server.listen()}/openenv/CoordSokoban`;
    const registry = await remoteSokoban(base);
    const host = await buildServer({ registry });
    try {
      const client = await TestClient.connect(await host.listen());
      const names = ["Up", "Down", "Left", "Right"];
      const answer = (envId: number, turn: number) =>
        `go</think><answer>${names[(envId * 7 + turn * 3) % 4]} || ${names[(envId + turn) % 4]}</answer>`;
      client.send({
        type: "env_open",
        id: "h",
        tag: "RemoteSokoban",
        groups: 2,
        group_size: 2,
        seed: 77,
        max_turn: 4,
      });
      const opened = await client.next((f) => f.type === "env_opened");
      const active = new Set((opened.episodes as { env_id: number }[]).map((e) => e.env_id));
      for (let turn = 0; active.size > 0; turn++) {
        const before = client.received.length;
        client.send({
          type: "env_step",
          id: "h",
          responses: [...active].map((env_id) => ({ env_id, text: answer(env_id, turn) })),
        });
        const stepped = await client.next(
          (f) => f.type === "env_stepped" && client.received.indexOf(f) >= before,
        );
        for (const r of stepped.results as { env_id: number; done: boolean }[])
          if (r.done) active.delete(r.env_id);
      }
      client.send({ type: "env_close", id: "h" });
      const closed = await client.next((f) => f.type === "env_closed");
      const scripted: Policy = {
        name: "scripted",
        generate: async (req) => ({
          text: answer(req.episode.envId, req.episode.turn),
          finishReason: "stop",
        }),
      };
      const request = defaultBatchRequest("train", {
        tags: [{ tag: "CoordSokoban", groups: 2 }],
        groupSize: 2,
        seed: 77,
      });
      request.episode = { ...request.episode, max_turn: 4 };
      const local = await runBatch(createRegistry(), request, scripted);
      const hosted = closed.episodes as EpisodeRecord[];
      expect(hosted.map((e) => e.failure)).toEqual([null, null, null, null]);
      expect(hosted.map(played)).toEqual(local.episodes.map(played));
      client.ws.terminate();
    } finally {
      await host.shutdown();
    }
  });
});
