// The built-in policies answer without I/O; they must still let the event loop run during a
// batch, or one large rollout holds /healthz and every other client until it ends. Counted in
// event-loop turns, never in time.
import { afterEach, describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import { oraclePolicy, randomPolicy } from "../../src/llm/builtin.ts";
import type { Policy } from "../../src/llm/policy.ts";
import { SLICE } from "../../src/llm/slices.ts";
import { runBatch } from "../../src/rollout/batch.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { loopTurns } from "../helpers/loop-turns.ts";
import { TestClient } from "../helpers/ws-client.ts";

const registry = createRegistry();

/** The policy, counting its answers. */
function counted(policy: Policy): { policy: Policy; answers: () => number } {
  let answers = 0;
  return {
    policy: {
      name: policy.name,
      generate: (request) => {
        answers++;
        return policy.generate(request);
      },
    },
    answers: () => answers,
  };
}

describe("built-in policies share the event loop", () => {
  for (const [name, make] of [
    ["oracle", oraclePolicy],
    ["random", randomPolicy],
  ] as const) {
    it(`${name}: a batch lets the event loop turn at least once per ${SLICE.turns} answers, however many episodes are in flight`, async () => {
      const { policy, answers } = counted(make());
      const loop = loopTurns();
      await runBatch(
        registry,
        // 512 episodes in flight at once: far more than one slice of answers.
        defaultBatchRequest("val", { tags: [{ tag: "SimpleSokoban", groups: 128 }], groupSize: 8 }),
        policy,
        { maxConcurrentGroups: 64 },
      );
      const turns = loop.stop();
      expect(answers()).toBeGreaterThan(8 * SLICE.turns);
      // At most SLICE.turns answers between two turns of the event loop.
      expect(turns).toBeGreaterThanOrEqual(Math.floor(answers() / SLICE.turns) - 1);
    });
  }
});

describe("a large built-in rollout on the server", () => {
  let server: RollgymServer | null = null;
  afterEach(async () => {
    await server?.shutdown();
    server = null;
  });

  it("/metrics answers while the batch runs, with part of its episodes played", async () => {
    server = await buildServer();
    const url = await server.listen();
    const client = await TestClient.connect(url);
    client.send({
      type: "rollout",
      id: "big",
      tags: [{ tag: "SimpleSokoban", groups: 128 }],
      mode: "val",
      group_size: 8,
      delivery: "batch",
    });
    client.send({ type: "credit", groups: 128 });
    // The rollout is playing once its first progress frame is out.
    await client.next((f) => f.type === "progress" && f.rollout === "big");
    // /metrics counts the episodes played when it answers: a policy that never yields would
    // let it answer only after the whole batch.
    const metrics = await fetch(`${url}/metrics`);
    expect(metrics.status).toBe(200);
    const played = [...(await metrics.text()).matchAll(/^rollgym_episodes_total\{[^}]*\} (\d+)$/gm)]
      .map((m) => Number(m[1]))
      .reduce((a, b) => a + b, 0);
    expect(played).toBeLessThan(1024);
    const batch = await client.next((f) => f.type === "batch" && f.rollout === "big", 120_000);
    expect(batch).toMatchObject({ episodes: 1024, failed: 0 });
    client.close();
  }, 180_000);
});
