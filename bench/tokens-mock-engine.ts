// The mock vLLM engine in a process of its own for bench/tokens.ts, so the engine and the
// rollout each get an event loop, as with a real engine. Prints "listening on URL" once up;
// each "stats" line on stdin is answered with one line of JSON: the engine's stats() and the
// process's CPU time so far (cpu_ms, user + system).
// Usage: node bench/tokens-mock-engine.ts [toy|qwen3]
import { createInterface } from "node:readline";
import { startMockEngine } from "../src/mock-engine/server.ts";
import type { TokenizerName } from "../src/mock-engine/tokenizer.ts";

const tokenizer = (process.argv[2] ?? "qwen3") as TokenizerName;
const engine = await startMockEngine({ model: "mock", seed: 1, tokenizer });
process.stdout.write(`listening on ${engine.url}\n`);

for await (const line of createInterface({ input: process.stdin })) {
  if (line.trim() === "stats") {
    const cpu = process.cpuUsage();
    process.stdout.write(
      `${JSON.stringify({ ...engine.stats(), cpu_ms: (cpu.user + cpu.system) / 1000 })}\n`,
    );
  }
}
// stdin closed: the bench is done.
await engine.close();
