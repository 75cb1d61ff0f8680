// The env server of bench/openenv.ts, run as a child process so its CPU is its own. Prints its
// base URL for the tag, then serves until killed.
//   --server rollgym: rollgym's own OpenEnv server (buildServer's /openenv/TAG), connection
//     caps raised for 1,024+ sessions. Steps answer at once.
//   --server delayed --step-delay-ms D: a minimal OpenEnv server (the same models) that plays
//     the tag in process and answers each step D ms later, as an env whose step takes time.
// Usage: node bench/openenv-env-server.ts [--server rollgym|delayed] [--tag T] [--step-delay-ms D]
import type { AddressInfo } from "node:net";
import { parseArgs } from "node:util";
import { WebSocketServer } from "ws";
import { createRegistry } from "../envs/catalog.ts";
import type { Env } from "../envs/types.ts";
import { buildServer } from "../src/server/app.ts";

const { values } = parseArgs({
  options: {
    server: { type: "string", default: "rollgym" },
    tag: { type: "string", default: "CoordFrozenLake" },
    "step-delay-ms": { type: "string", default: "0" },
  },
});
const tag = values.tag!;
const delayMs = Number(values["step-delay-ms"]);
if (!(delayMs >= 0)) throw new Error(`--step-delay-ms: ${values["step-delay-ms"]} is not a number ≥ 0`);

if (values.server === "rollgym") {
  const many = 1 << 16;
  const server = await buildServer({
    connections: { maxConnections: many, maxConnectionsPerAddress: many, maxPendingConnections: many },
    openenv: { maxSessions: many },
    maxHeldBytes: 2 ** 32,
    maxHeldBytesPerConnection: 2 ** 32,
    logger: { level: "error" },
  });
  console.log(`${await server.listen(0, "127.0.0.1")}/openenv/${tag}`);
} else if (values.server === "delayed") {
  const resolved = createRegistry().tag(tag);
  const wss = new WebSocketServer({ host: "127.0.0.1", port: 0, perMessageDeflate: false });
  wss.on("connection", (ws) => {
    let env: Env | null = null;
    const answer = (text: string, reward: number | null, done: boolean, truncated: boolean, info: object) =>
      JSON.stringify({
        type: "observation",
        data: { observation: { text, actions: env!.actionNames, truncated, info }, reward, done },
      });
    ws.on("message", (raw) => {
      const message = JSON.parse(raw.toString()) as {
        type: string;
        data?: { seed?: number; action?: string };
      };
      if (message.type === "close") return ws.close(1000);
      if (message.type === "reset") {
        env = resolved.make();
        return ws.send(answer(env.reset(message.data?.seed ?? 0), null, false, false, {}));
      }
      const e = env!;
      const id = e.actionNames.indexOf(message.data?.action ?? "") + 1;
      if (id === 0 || e.done) {
        const data = {
          message: `cannot step ${JSON.stringify(message.data?.action)} now`,
          code: "EXECUTION_ERROR",
        };
        return ws.send(JSON.stringify({ type: "error", data }));
      }
      const result = e.step(id);
      const reply = answer(
        result.observation,
        result.reward,
        result.terminated || result.truncated,
        result.truncated,
        result.info,
      );
      if (delayMs > 0) setTimeout(() => ws.send(reply), delayMs);
      else ws.send(reply);
    });
  });
  await new Promise((resolve) => wss.once("listening", resolve));
  console.log(`http://127.0.0.1:${(wss.address() as AddressInfo).port}`);
} else throw new Error(`--server: ${values.server} is not one of rollgym, delayed`);
