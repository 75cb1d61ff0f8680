// Rollout throughput: episodes/s and LLM requests/s against the mock vLLM engine at zero
// latency (so the figure is rollgym's own overhead: prompts, HTTP, parsing, env steps),
// and the same batch with the in-process oracle policy for reference.
// Usage: node bench/rollout.ts [--groups N] [--group-size N] [--concurrency N] [--tag T] [--json FILE]
import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { createRegistry } from "../envs/catalog.ts";
import { oraclePolicy } from "../src/llm/builtin.ts";
import { ChatPolicy } from "../src/llm/openai-chat.ts";
import type { Policy } from "../src/llm/policy.ts";
import { type BatchRequest, runBatch } from "../src/rollout/batch.ts";
import { defaultBatchRequest } from "../src/rollout/request.ts";

const { values } = parseArgs({
  options: {
    groups: { type: "string", default: "64" },
    "group-size": { type: "string", default: "16" },
    concurrency: { type: "string", default: "64" },
    tag: { type: "string", default: "CoordSokoban" },
    json: { type: "string" },
  },
});
const groups = Number(values.groups);
const groupSize = Number(values["group-size"]);
const concurrency = Number(values.concurrency);

const request: BatchRequest = defaultBatchRequest("train", {
  tags: [{ tag: values.tag!, groups }],
  groupSize,
});

interface Row {
  policy: string;
  episodes: number;
  turns: number;
  seconds: number;
  episodes_per_s: number;
  requests_per_s: number;
  failed: number;
}

async function measure(name: string, policy: Policy): Promise<Row> {
  const registry = createRegistry();
  const start = performance.now();
  const batch = await runBatch(registry, request, policy);
  const seconds = (performance.now() - start) / 1000;
  const turns = batch.episodes.reduce((n, e) => n + e.turns.length, 0);
  return {
    policy: name,
    episodes: batch.episodes.length,
    turns,
    seconds,
    episodes_per_s: batch.episodes.length / seconds,
    requests_per_s: turns / seconds,
    failed: batch.failed,
  };
}

/** The mock engine in its own process, as a real engine would be, so both get their own event loop. */
async function spawnEngine(): Promise<{ url: string; stop(): void }> {
  const child = spawn(
    process.execPath,
    ["src/cli/main.ts", "mock-engine", "--port", "0", "--model", "mock", "--seed", "1"],
    {
      stdio: ["ignore", "pipe", "inherit"],
    },
  );
  const lines = createInterface({ input: child.stdout! });
  for await (const line of lines) {
    const match = /listening on (\S+)/.exec(line);
    if (match) return { url: match[1], stop: () => child.kill("SIGTERM") };
  }
  throw new Error("the mock engine exited before listening");
}

const engine = await spawnEngine();
const rows: Row[] = [];
try {
  const chat = new ChatPolicy({ baseURL: engine.url, model: "mock", concurrency });
  await chat.preflight();
  await measure("warm-up", chat);
  rows.push(await measure(`mock vLLM over HTTP (concurrency ${concurrency})`, chat));
  rows.push(await measure("in-process oracle", oraclePolicy()));
} finally {
  engine.stop();
}

const table = [
  "policy                                   episodes   turns  seconds  episodes/s  requests/s  failed",
  ...rows.map(
    (r) =>
      `${r.policy.padEnd(40)} ${String(r.episodes).padStart(8)} ${String(r.turns).padStart(7)} ${r.seconds.toFixed(2).padStart(8)} ` +
      `${r.episodes_per_s.toFixed(0).padStart(11)} ${r.requests_per_s.toFixed(0).padStart(11)} ${String(r.failed).padStart(7)}`,
  ),
];
process.stdout.write(
  `${values.tag} train batch, ${groups} groups × ${groupSize}, node ${process.version}\n${table.join("\n")}\n`,
);
if (values.json)
  writeFileSync(values.json, `${JSON.stringify({ tag: values.tag, groups, groupSize, rows }, null, 2)}\n`);
