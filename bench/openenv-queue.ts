// Queueing behind a remote env's sessions (#31 item 1): 64 episodes of 5 steps (16 groups × 4,
// all at once) on a minimal OpenEnv server that holds --server-sessions sessions (CAPACITY_REACHED
// with its max_sessions beyond them, as OpenEnv answers) and answers each step --step-ms later.
// Each row declares a max_sessions: the server's own, and over-declared. Prints per row the wall
// time against the ideal episodes × steps × step ÷ sessions, the failed episodes, and the
// connects the server refused. The first episode's seed check adds 2 resets and 4 steps.
// Usage: node bench/openenv-queue.ts [--server-sessions 4] [--step-ms 100] [--declared 4,16]
//          [--capacity-wait-s 60]
import type { AddressInfo } from "node:net";
import { parseArgs } from "node:util";
import { WebSocketServer } from "ws";
import { buildRegistry } from "../src/cli/build-registry.ts";
import { defaultConfig } from "../src/config/index.ts";
import { applyCustomEnvs } from "../src/config/registry.ts";
import { randomPolicy } from "../src/llm/builtin.ts";
import { runBatch } from "../src/rollout/batch.ts";
import { defaultBatchRequest } from "../src/rollout/request.ts";

const { values } = parseArgs({
  options: {
    "server-sessions": { type: "string", default: "4" },
    "step-ms": { type: "string", default: "100" },
    declared: { type: "string", default: "4,16" },
    "capacity-wait-s": { type: "string", default: "60" },
  },
});
const sessions = Number(values["server-sessions"]);
const stepMs = Number(values["step-ms"]);
const GROUPS = 16;
const GROUP_SIZE = 4;
const STEPS = 5;

/** The server: counts what it refused; a session ends at the close message, as OpenEnv's does. */
const server = { open: 0, most: 0, refused: 0 };
const wss = new WebSocketServer({ host: "127.0.0.1", port: 0, perMessageDeflate: false });
wss.on("connection", (ws) => {
  if (server.open >= sessions) {
    server.refused++;
    const data = {
      message: "Server at capacity",
      code: "CAPACITY_REACHED",
      active_sessions: server.open,
      max_sessions: sessions,
    };
    ws.send(JSON.stringify({ type: "error", data }));
    ws.close(1000);
    return;
  }
  server.open++;
  server.most = Math.max(server.most, server.open);
  let ended = false;
  const end = () => {
    if (!ended) server.open--;
    ended = true;
  };
  ws.once("close", end);
  let seed = 0;
  let step = 0;
  const observation = (reward: number | null) =>
    JSON.stringify({
      type: "observation",
      data: {
        observation: { text: `seed ${seed}, step ${step}`, actions: ["Go", "Stay"] },
        reward,
        done: step >= STEPS,
      },
    });
  ws.on("message", (raw) => {
    const message = JSON.parse(raw.toString()) as { type: string; data?: Record<string, unknown> };
    if (message.type === "close") {
      end();
      return ws.close(1000);
    }
    if (message.type === "reset") {
      seed = Number(message.data?.seed ?? 0);
      step = 0;
      return ws.send(observation(null));
    }
    step++;
    const answer = observation(message.data?.action === "Go" ? 1 : 0);
    setTimeout(() => ws.readyState === ws.OPEN && ws.send(answer), stepMs);
  });
});
await new Promise((resolve) => wss.once("listening", resolve));
const base = `http://127.0.0.1:${(wss.address() as AddressInfo).port}`;

for (const declared of values.declared!.split(",").map(Number)) {
  const config = defaultConfig();
  config.custom_envs = {
    Walk: {
      env_type: "openenv",
      max_actions_per_traj: STEPS,
      env_instruction: "Walk.\n",
      max_tokens: 50,
      env_config: { url: base, max_sessions: declared, capacity_wait_s: Number(values["capacity-wait-s"]) },
    },
  } as never;
  const registry = await buildRegistry(defaultConfig());
  applyCustomEnvs(registry, config);
  Object.assign(server, { most: 0, refused: 0 });
  const started = performance.now();
  const result = await runBatch(
    registry,
    defaultBatchRequest("val", { tags: [{ tag: "Walk", groups: GROUPS }], groupSize: GROUP_SIZE, seed: 1 }),
    randomPolicy(),
  );
  const wallS = (performance.now() - started) / 1000;
  const steps = result.episodes.reduce(
    (n, e) => n + e.turns.reduce((m, t) => m + (t.actions?.length ?? 0), 0),
    0,
  );
  console.log(
    JSON.stringify({
      declared,
      server_sessions: sessions,
      step_ms: stepMs,
      episodes: result.episodes.length,
      failed: result.failed,
      env_steps: steps,
      wall_s: Number(wallS.toFixed(2)),
      ideal_s: (GROUPS * GROUP_SIZE * STEPS * stepMs) / 1000 / sessions,
      refused_connects: server.refused,
      most_sessions: server.most,
      failures: [
        ...new Set(result.episodes.flatMap((e) => (e.failure ? [e.failure.replace(/\d+/g, "N")] : []))),
      ],
    }),
  );
}
for (const ws of wss.clients) ws.terminate();
wss.close();
