// `rollgym bench`: load tests of the rollout layer. Starts (or attaches to) `rollgym serve` and
// engines, drives them over the real WebSocket protocol, and prints a table (or JSON, Markdown,
// SVG charts) over episodes in flight × engine replicas × latency models.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Progress } from "../bench/progress.ts";
import { markdownTable, svgCharts, textTable } from "../bench/report.ts";
import { type BenchCase, type BenchSettings, type CaseResult, runCase } from "../bench/run.ts";
import { LATENCY_PRESET_NAMES, type LatencyPresetName } from "../mock-engine/latency.ts";
import {
  CommandFailure,
  expectPositionals,
  type FlagSpec,
  parseArgs,
  parseChoice,
  parseInteger,
  UsageError,
} from "./args.ts";
import { io } from "./io.ts";

export const BENCH_FLAGS: Record<string, FlagSpec> = {
  episodes: {
    kind: "value",
    arg: "N,…",
    help: "episodes in flight, one case each (default 64,256,1024; multiples of group size × clients)",
  },
  replicas: { kind: "value", arg: "N,…", help: "mock engine replicas per case: 1, 2 or 4 (default 1)" },
  "latency-model": {
    kind: "value",
    arg: "NAME,…",
    help: `mock engine latency presets: ${LATENCY_PRESET_NAMES.join(", ")} (default default)`,
  },
  duration: {
    kind: "value",
    arg: "S",
    help: "measurement window in seconds, after the warm-up (default 20)",
  },
  "max-turn": { kind: "value", arg: "N", help: "turns per episode (default 2)" },
  "max-tokens": { kind: "value", arg: "N", help: "max_tokens per request (default 16)" },
  "group-size": { kind: "value", arg: "N", help: "episodes per group (default 16)" },
  clients: {
    kind: "value",
    arg: "N",
    help: "simulated trainers (WebSocket connections) sharing the load (default 1)",
  },
  tag: { kind: "value", arg: "TAG", help: "env tag the episodes play (default CoordSokoban)" },
  seed: { kind: "value", arg: "N", help: "seed of the first group (default 10000)" },
  llm: {
    kind: "value",
    arg: "URL[,URL…]",
    help: "real OpenAI-compatible engines (…/v1) instead of mock engines; needs --model",
  },
  model: { kind: "value", arg: "M", help: "the model served at --llm" },
  server: {
    kind: "value",
    arg: "URL",
    help: "drive a running rollgym serve (http://HOST:PORT) instead of starting one; needs --llm",
  },
  "server-pid": { kind: "value", arg: "PID", help: "the --server's process id, for its CPU and memory" },
  token: { kind: "value", arg: "T", help: "the --server's bearer token (default $ROLLGYM_TOKEN)" },
  "no-saturation": { kind: "switch", help: "skip the plain load generator (no saturation ratio)" },
  json: { kind: "switch", help: "print the results as JSON" },
  markdown: { kind: "switch", help: "print a Markdown table" },
  svg: { kind: "value", arg: "DIR", help: "write SVG charts of the results into DIR" },
};

export const BENCH_DETAILS =
  "Each case starts mock engines (rollgym mock-engine) and a server (rollgym serve --group-concurrency =\n" +
  "episodes ÷ group size ÷ clients), warms up with one wave of groups, measures a window while every\n" +
  "slot is busy, drains (every episode finishes), then drives the same engines with a plain load\n" +
  "generator at the same concurrency: saturation = engine tokens/s under rollgym ÷ under the generator.\n" +
  "Server CPU per request is the serve process's user+system time over the engines' chat requests.\n" +
  "With GPUs: --llm URL[,URL…] --model M drives real engines (vLLM's /metrics gives requests and tokens).";

interface Parsed {
  settings: BenchSettings;
  cases: BenchCase[];
  output: "text" | "json" | "markdown";
  svgDir: string | null;
}

function list(flag: string, text: string, min: number, max: number): number[] {
  const values = text.split(",").map((part) => parseInteger(flag, part.trim(), min, max));
  return [...new Set(values)];
}

export function parseBenchArgs(argv: readonly string[]): Parsed {
  const args = parseArgs("bench", argv, BENCH_FLAGS);
  expectPositionals("bench", args, []);
  const v = args.values;
  const groupSize = parseInteger("--group-size", v.get("group-size") ?? "16", 1, 4096);
  const clients = parseInteger("--clients", v.get("clients") ?? "1", 1, 64);
  const episodes = list("--episodes", v.get("episodes") ?? "64,256,1024", 1, 1_000_000);
  for (const n of episodes) {
    if (n % (groupSize * clients) !== 0)
      throw new UsageError(
        `--episodes: ${n} is not a multiple of group size × clients (${groupSize} × ${clients} = ${groupSize * clients})`,
      );
  }
  const llm = v.has("llm")
    ? v
        .get("llm")!
        .split(",")
        .map((u) => u.trim())
    : null;
  if (llm) {
    for (const url of llm) {
      if (!/^https?:\/\/[^\s]+$/.test(url))
        throw new UsageError(
          `--llm: ${JSON.stringify(url)} is not an http(s) URL (e.g. http://gpu1:8000/v1)`,
        );
    }
    if (!v.has("model")) throw new UsageError("--llm needs --model: the model the engines serve");
    if (v.has("replicas"))
      throw new UsageError("--replicas starts mock engines; with --llm the replicas are its URLs");
    if (v.has("latency-model")) throw new UsageError("--latency-model applies to mock engines, not to --llm");
  } else if (v.has("model")) {
    throw new UsageError("--model names the model of --llm; mock engines serve their own");
  }
  const replicas = llm ? [llm.length] : list("--replicas", v.get("replicas") ?? "1", 1, 4);
  for (const r of replicas) {
    if (![1, 2, 4].includes(r)) throw new UsageError(`--replicas: ${r} is not one of 1, 2, 4`);
  }
  const models: (LatencyPresetName | null)[] = llm
    ? [null]
    : [
        ...new Set(
          (v.get("latency-model") ?? "default")
            .split(",")
            .map((m) => parseChoice("--latency-model", m.trim(), LATENCY_PRESET_NAMES)),
        ),
      ];
  const server = v.get("server") ?? null;
  if (server !== null) {
    if (!/^https?:\/\/[^\s/]+\/?$/.test(server))
      throw new UsageError(
        `--server: ${JSON.stringify(server)} is not a server URL like http://127.0.0.1:8787`,
      );
    if (!llm)
      throw new UsageError(
        "--server needs --llm URL[,URL…]: the engines that server uses (their /metrics count requests and tokens)",
      );
    if (episodes.length > 1)
      throw new UsageError(
        "--server: an attached server's group concurrency is fixed, so --episodes takes one value (start it with --group-concurrency = episodes ÷ group size ÷ clients)",
      );
  } else if (v.has("server-pid") || v.has("token")) {
    throw new UsageError(`--${v.has("server-pid") ? "server-pid" : "token"} applies to --server only`);
  }
  const outputs = (["json", "markdown"] as const).filter((f) => args.switches.has(f));
  if (outputs.length > 1) throw new UsageError("--json and --markdown: choose one");
  const settings: BenchSettings = {
    tag: v.get("tag") ?? "CoordSokoban",
    groupSize,
    maxTurn: parseInteger("--max-turn", v.get("max-turn") ?? "2", 1, 1000),
    maxTokens: parseInteger("--max-tokens", v.get("max-tokens") ?? "16", 1, 1_000_000),
    clients,
    durationS: parseInteger("--duration", v.get("duration") ?? "20", 1, 86_400),
    seed: parseInteger("--seed", v.get("seed") ?? "10000", 0, 2 ** 31),
    llm,
    model: v.get("model") ?? "",
    server,
    serverPid: v.has("server-pid") ? parseInteger("--server-pid", v.get("server-pid")!, 1, 2 ** 31) : null,
    token: v.get("token") ?? (server ? (process.env.ROLLGYM_TOKEN ?? null) : null),
    saturation: !args.switches.has("no-saturation"),
  };
  const cases = models.flatMap((latencyModel) =>
    replicas.flatMap((r) => episodes.map((n) => ({ episodes: n, replicas: r, latencyModel }))),
  );
  return { settings, cases, output: outputs[0] ?? "text", svgDir: v.get("svg") ?? null };
}

export async function benchCommand(argv: readonly string[]): Promise<number> {
  const { settings, cases, output, svgDir } = parseBenchArgs(argv);
  const { stdout, stderr } = io();
  const progress = new Progress(stderr);
  const results: CaseResult[] = [];
  const errors: string[] = [];
  for (const bench of cases) {
    let result: CaseResult;
    try {
      result = await runCase(settings, bench, progress);
    } catch (error) {
      // One case failing (a server that stalled past every timeout) keeps the others' results.
      const message = `${bench.episodes} in flight, ${bench.replicas} replica(s), ${bench.latencyModel ?? "real"}: ${error instanceof Error ? error.message : String(error)}`;
      errors.push(message);
      if (cases.length > 1) progress.note(`rollgym: bench: ${message}`);
      continue;
    }
    results.push(result);
    progress.note(
      `${result.episodes_in_flight} in flight, ${result.replicas} replica(s), ${result.latency_model}: ` +
        `${result.episodes_per_s} episodes/s, ${result.requests_per_s} requests/s, server ${result.server_cpu_ms_per_request ?? "–"} ms CPU/request, ` +
        `saturation ${result.saturation_ratio ?? "–"}, ${result.episodes_finished}/${result.episodes_total} finished`,
    );
  }
  progress.done();
  if (results.length === 0) throw new CommandFailure(`bench: ${errors[0]}`);
  if (svgDir !== null) {
    mkdirSync(svgDir, { recursive: true });
    for (const chart of svgCharts(results)) writeFileSync(join(svgDir, chart.file), chart.svg);
  }
  if (output === "json") stdout.write(`${JSON.stringify({ results }, null, 2)}\n`);
  else stdout.write(`${output === "markdown" ? markdownTable(results) : textTable(results)}\n`);
  // A case with episodes that did not finish is a failed bench.
  return errors.length === 0 && results.every((r) => r.episodes_failed === 0) ? 0 : 1;
}
