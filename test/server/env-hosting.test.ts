// Env hosting over the socket plays exactly the episodes `runBatch` plays with the same
// responses, and refuses steps for unknown or finished episodes without changing anything.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import type { Policy } from "../../src/llm/policy.ts";
import { runBatch } from "../../src/rollout/batch.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { type Frame, TestClient } from "../helpers/ws-client.ts";

/** A deterministic "model": the answer depends only on env id and turn. */
function answer(envId: number, turn: number): string {
  const names = ["Up", "Down", "Left", "Right"];
  if ((envId + turn) % 5 === 4) return "no answer at all";
  return `think ${envId}.${turn}</think><answer>${names[(envId * 7 + turn * 3) % 4]} || ${names[(envId + turn) % 4]}</answer>`;
}

let server: RollgymServer;
let url: string;
beforeAll(async () => {
  server = await buildServer();
  url = await server.listen(0);
});
afterAll(async () => {
  await server.shutdown();
});

describe("env hosting", () => {
  it("plays full RAGEN episodes equal to a rollout given the same responses", async () => {
    const client = await TestClient.connect(url);
    client.send({
      type: "env_open",
      id: "h",
      tag: "SimpleSokoban",
      groups: 3,
      group_size: 2,
      seed: 10000,
      max_turn: 5,
    });
    const opened = await client.next((f) => f.type === "env_opened");
    const episodes = opened.episodes as { env_id: number; messages: { role: string; content: string }[] }[];
    expect(episodes).toHaveLength(6);
    const active = new Set(episodes.map((e) => e.env_id));
    for (let turn = 0; active.size > 0; turn++) {
      client.send({
        type: "env_step",
        id: "h",
        responses: [...active].map((env_id) => ({ env_id, text: answer(env_id, turn) })),
      });
      const stepped = await client.next((f) => f.type === "env_stepped" && !(f as { _seen?: boolean })._seen);
      (stepped as { _seen?: boolean })._seen = true;
      for (const r of stepped.results as { env_id: number; done: boolean; messages: unknown }[]) {
        if (r.done) {
          active.delete(r.env_id);
          expect(r.messages).toBeNull();
        }
      }
    }
    client.send({ type: "env_close", id: "h" });
    const closed = await client.next((f) => f.type === "env_closed");

    const scripted: Policy = {
      name: "scripted",
      generate: async (req) => ({ text: answer(req.episode.envId, req.episode.turn), finishReason: "stop" }),
    };
    const request = defaultBatchRequest("train", {
      tags: [{ tag: "SimpleSokoban", groups: 3 }],
      groupSize: 2,
      seed: 10000,
    });
    const batch = await runBatch(createRegistry(), request, scripted);
    const strip = (e: Record<string, unknown>) => ({
      ...e,
      turns: (e.turns as Record<string, unknown>[]).map((t) => ({ ...t, finish_reason: null })),
    });
    expect((closed.episodes as Record<string, unknown>[]).map(strip)).toEqual(
      batch.episodes.map((e) => strip(e as unknown as Record<string, unknown>)),
    );
    // Rollout-only counters (inference failures, the context window, engine splits and drift).
    const expectedMetrics = Object.fromEntries(
      Object.entries(batch.metrics).filter(([key]) => !key.startsWith("rollgym/")),
    );
    expect(closed.metrics).toEqual(expectedMetrics);
    expect(episodes[0].messages).toEqual([
      { role: "system", content: expect.stringContaining("You are solving the Sokoban puzzle.") },
      { role: "user", content: expect.stringContaining("\nTurn 1:\nState:\n") },
    ]);
    client.close();
  });

  it("refuses unknown and finished episodes, changing nothing", async () => {
    const client = await TestClient.connect(url);
    client.send({ type: "env_open", id: "b", tag: "Bandit", groups: 1, group_size: 2, seed: 123 });
    await client.next((f) => f.type === "env_opened");
    client.send({
      type: "env_step",
      id: "b",
      responses: [
        { env_id: 0, text: "x</think><answer>Artist</answer>" },
        { env_id: 9, text: "" },
      ],
    });
    const unknown: Frame = await client.next((f) => f.type === "error");
    expect(unknown).toMatchObject({ code: "unknown_env" });
    client.send({
      type: "env_step",
      id: "b",
      responses: [{ env_id: 0, text: "x</think><answer>Artist</answer>" }],
    });
    const ok = await client.next((f) => f.type === "env_stepped");
    expect(ok.results).toEqual([
      expect.objectContaining({ env_id: 0, actions: ["Artist"], done: true, success: true, messages: null }),
    ]);
    client.send({ type: "env_step", id: "b", responses: [{ env_id: 0, text: "again" }] });
    expect(await client.next((f) => f.type === "error" && f.code === "episode_done")).toBeTruthy();
    client.close();
  });
});
