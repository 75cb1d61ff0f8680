// `rollgym bench`: load tests of the rollout layer. Starts (or attaches to) `rollgym serve` and
// engines, drives them over the real WebSocket protocol, and prints a table (or JSON, Markdown,
// SVG charts) over episodes in flight × engine replicas × latency models. `rollgym bench async`
// instead times a simulated trainer's steps, synchronous against asynchronous
// (src/bench/async-run.ts).
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { PAUSE_MODES } from "../../protocol/settings.ts";
import { asyncMarkdownTable, asyncTextTable } from "../bench/async-report.ts";
import { type AsyncBenchResult, type AsyncBenchSettings, runAsyncBench } from "../bench/async-run.ts";
import { Progress } from "../bench/progress.ts";
import { markdownTable, svgCharts, textTable } from "../bench/report.ts";
import {
  BENCH_MODES,
  type BenchCase,
  type BenchSettings,
  type CaseResult,
  pairModes,
  runCase,
} from "../bench/run.ts";
import { LATENCY_PRESET_NAMES, type LatencyPresetName, parseResponseTokens } from "../mock-engine/latency.ts";
import {
  CommandFailure,
  expectPositionals,
  type FlagSpec,
  type ParsedArgs,
  parseArgs,
  parseChoice,
  parseInteger,
  parseNumber,
  UsageError,
} from "./args.ts";
import { io } from "./io.ts";

/** The episode shape and output flags both benches take; their defaults differ. */
function sharedFlags(defaults: {
  replicas: string;
  latencyModel: string;
  maxTurn: number;
  maxTokens: number;
  groupSize: number;
}): Record<string, FlagSpec> {
  return {
    replicas: { kind: "value", arg: "N,…", help: `mock engine replicas: 1, 2 or 4 (${defaults.replicas})` },
    "latency-model": {
      kind: "value",
      arg: "NAME,…",
      help: `mock engine latency presets: ${LATENCY_PRESET_NAMES.join(", ")} (${defaults.latencyModel})`,
    },
    "max-turn": { kind: "value", arg: "N", help: `turns per episode (default ${defaults.maxTurn})` },
    "max-tokens": { kind: "value", arg: "N", help: `max_tokens per request (default ${defaults.maxTokens})` },
    "group-size": { kind: "value", arg: "N", help: `episodes per group (default ${defaults.groupSize})` },
    tag: { kind: "value", arg: "TAG", help: "env tag the episodes play (default CoordSokoban)" },
    seed: { kind: "value", arg: "N", help: "seed of the first group (default 10000)" },
    json: { kind: "switch", help: "print the results as JSON" },
    markdown: { kind: "switch", help: "print a Markdown table" },
  };
}

export const BENCH_FLAGS: Record<string, FlagSpec> = {
  episodes: {
    kind: "value",
    arg: "N,…",
    help: "episodes in flight, one case each (default 64,256,1024; multiples of group size × clients)",
  },
  ...sharedFlags({
    replicas: "one case each; default 1",
    latencyModel: "one case each; default default",
    maxTurn: 2,
    maxTokens: 16,
    groupSize: 16,
  }),
  duration: {
    kind: "value",
    arg: "S",
    help: "measurement window in seconds, after the warm-up (default 20)",
  },
  clients: {
    kind: "value",
    arg: "N",
    help: "simulated trainers (WebSocket connections) sharing the load (default 1)",
  },
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
  mode: {
    kind: "value",
    arg: "chat,tokens",
    help: "rollgym's modes, each case run in each (default chat); tokens = rollouts with tokens: true, the mock engines with the Qwen3 tokenizer",
  },
  "no-saturation": { kind: "switch", help: "skip the plain load generator (no saturation ratio)" },
  "no-floor": {
    kind: "switch",
    help: "skip the floor clients (raw socket and undici, chat mode; no server ÷ floor multiples)",
  },
  "serve-from": {
    kind: "value",
    arg: "DIR",
    help: "start serve from the checkout at DIR (its bin/rollgym.js) instead of this one, for A/B runs",
  },
  svg: { kind: "value", arg: "DIR", help: "write SVG charts of the results into DIR" },
};

export const ASYNC_BENCH_FLAGS: Record<string, FlagSpec> = {
  steps: { kind: "value", arg: "N", help: "training steps per mode (default 8)" },
  "groups-per-step": {
    kind: "value",
    arg: "N",
    help: "groups the trainer takes per step, and groups running at once (default 8)",
  },
  staleness: {
    kind: "value",
    arg: "S,…",
    help: "max_staleness of each async mode, 0 = the synchronous control (default 0,1,2)",
  },
  strict: {
    kind: "switch",
    help: "also run each async mode with S > 0 under strict_staleness (S=s strict: no trained group older than S)",
  },
  "step-time": {
    kind: "value",
    arg: "S",
    help: "the trainer's step time, seconds (default: the measured sync rollout time per step)",
  },
  "pause-mode": {
    kind: "value",
    arg: PAUSE_MODES.join("|"),
    help: "how begin_update pauses the engines (default keep)",
  },
  "response-tokens": {
    kind: "value",
    arg: "lognormal:MEDIAN:P99|natural",
    help: "the mock engines' response lengths in tokens, capped at --max-tokens (default: the latency model's)",
  },
  ...sharedFlags({
    replicas: "one value; default 1",
    latencyModel: "one value; default default",
    maxTurn: 5,
    maxTokens: 512,
    groupSize: 8,
  }),
};

export const BENCH_DETAILS =
  "Each case starts mock engines (rollgym mock-engine) and a server (rollgym serve --group-concurrency =\n" +
  "episodes ÷ group size ÷ clients), warms up with one wave of groups, measures a window while every\n" +
  "slot is busy, drains (every episode finishes), then drives the same engines with a plain load\n" +
  "generator at the same concurrency: saturation = engine tokens/s under rollgym ÷ under the generator.\n" +
  "Server CPU per request is the serve process's user+system time over the engines' chat requests.\n" +
  "Then, in chat mode, the floor: a raw keep-alive socket client and an undici Client per connection,\n" +
  "each in a child process of its own, send the generator's bodies at the same concurrency for as long;\n" +
  "their own CPU per request, and server CPU per request ÷ each, are reported. --mode chat,tokens runs\n" +
  "each case in both modes side by side: engine requests per turn (every HTTP request the engines got,\n" +
  "/tokenize and /detokenize included) and server CPU per turn, token mode ÷ chat mode.\n" +
  "RSS is the serve process's VmHWM and VmRSS after the drain, beside the bound docs/server.md derives\n" +
  "from the limits at the case's settings; serve runs on the runtime the bench was started with\n" +
  "(ROLLGYM_RUNTIME, NODE_OPTIONS: Node's defaults unless set; the JSON records them as server_runtime).\n" +
  "With GPUs: --llm URL[,URL…] --model M drives real engines (vLLM's /metrics gives requests and tokens).\n" +
  "Seconds per training step, sync against async: rollgym bench async (--async is its old spelling).";

export const ASYNC_BENCH_DETAILS =
  "One server and mock engines; a trainer session takes --groups-per-step groups per step, sleeps\n" +
  "--step-time and pushes weights (begin_update, the engines load new weights, end_update). sync = rollout,\n" +
  "step, update; S=s = an endless stream with max_staleness s that plays on while the trainer steps.\n" +
  "Reports seconds per step, speedup, the age of every trained group and the time paused per update.";

/** A /metrics read slower than this shifts the engine-side figures noticeably against the window. */
const LATE_METRICS_MS = 1000;

/** Parses `argv` with `own`; a flag only the other bench takes is named as the other's, not as unknown. */
function parseBench(
  command: string,
  argv: readonly string[],
  own: Record<string, FlagSpec>,
  other: { command: string; flags: Record<string, FlagSpec> },
): ParsedArgs {
  const end = argv.indexOf("--");
  const names = (end < 0 ? argv : argv.slice(0, end)).map((arg) => /^--([^=]+)/.exec(arg)?.[1]);
  const misplaced = names.find((name) => name !== undefined && name in other.flags && !(name in own));
  if (misplaced !== undefined) {
    const allowed = Object.keys(own).map((f) => `--${f}`);
    throw new UsageError(
      `${command}: --${misplaced} is a flag of rollgym ${other.command}; allowed: ${allowed.join(", ")}`,
    );
  }
  const args = parseArgs(command, argv, own);
  expectPositionals(command, args, []);
  return args;
}

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

function outputOf(args: ParsedArgs): "text" | "json" | "markdown" {
  const outputs = (["json", "markdown"] as const).filter((f) => args.switches.has(f));
  if (outputs.length > 1) throw new UsageError("--json and --markdown: choose one");
  return outputs[0] ?? "text";
}

function parseAsyncBenchArgs(args: ParsedArgs): {
  settings: AsyncBenchSettings;
  output: "text" | "json" | "markdown";
} {
  const v = args.values;
  const one = (flag: string, text: string) => {
    if (text.includes(","))
      throw new UsageError(`--${flag}: bench async takes one value, got ${JSON.stringify(text)}`);
    return text;
  };
  const replicas = parseInteger("--replicas", one("replicas", v.get("replicas") ?? "1"), 1, 4);
  if (![1, 2, 4].includes(replicas)) throw new UsageError(`--replicas: ${replicas} is not one of 1, 2, 4`);
  let stepTimeS: number | null = null;
  if (v.has("step-time")) {
    stepTimeS = parseNumber("--step-time", v.get("step-time")!);
    if (stepTimeS < 0 || stepTimeS > 3600)
      throw new UsageError(`--step-time: ${stepTimeS} is not a number of seconds from 0 to 3600`);
  }
  let responseTokens: AsyncBenchSettings["responseTokens"];
  if (v.has("response-tokens")) {
    try {
      responseTokens = parseResponseTokens(v.get("response-tokens")!);
    } catch (error) {
      throw new UsageError(`--response-tokens: ${error instanceof Error ? error.message : String(error)}`);
    }
  }
  const settings: AsyncBenchSettings = {
    tag: v.get("tag") ?? "CoordSokoban",
    groupSize: parseInteger("--group-size", v.get("group-size") ?? "8", 1, 4096),
    groupsPerStep: parseInteger("--groups-per-step", v.get("groups-per-step") ?? "8", 1, 4096),
    steps: parseInteger("--steps", v.get("steps") ?? "8", 1, 100_000),
    maxTurn: parseInteger("--max-turn", v.get("max-turn") ?? "5", 1, 1000),
    maxTokens: parseInteger("--max-tokens", v.get("max-tokens") ?? "512", 1, 1_000_000),
    seed: parseInteger("--seed", v.get("seed") ?? "10000", 0, 2 ** 31),
    staleness: list("--staleness", v.get("staleness") ?? "0,1,2", 0, 1000),
    strict: args.switches.has("strict"),
    stepTimeS,
    replicas,
    latencyModel: parseChoice(
      "--latency-model",
      one("latency-model", v.get("latency-model") ?? "default"),
      LATENCY_PRESET_NAMES,
    ),
    ...(responseTokens === undefined ? {} : { responseTokens }),
    pauseMode: parseChoice("--pause-mode", v.get("pause-mode") ?? "keep", PAUSE_MODES),
  };
  return { settings, output: outputOf(args) };
}

function parseBenchArgs(args: ParsedArgs): Parsed {
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
  const modes = [
    ...new Set((v.get("mode") ?? "chat").split(",").map((m) => parseChoice("--mode", m.trim(), BENCH_MODES))),
  ];
  const serveFrom = v.get("serve-from") ?? null;
  if (serveFrom !== null && server !== null)
    throw new UsageError(
      "--serve-from starts serve from another checkout; with --server the bench starts none",
    );
  const output = outputOf(args);
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
    floor: !args.switches.has("no-floor"),
    serveFrom,
  };
  // Each case's modes one after the other, so the two rows compared ran under the same load.
  const cases = models.flatMap((latencyModel) =>
    replicas.flatMap((r) =>
      episodes.flatMap((n) => modes.map((mode) => ({ episodes: n, replicas: r, latencyModel, mode }))),
    ),
  );
  return { settings, cases, output, svgDir: v.get("svg") ?? null };
}

/** `rollgym bench async`. */
export async function asyncBenchCommand(argv: readonly string[]): Promise<number> {
  const args = parseBench("bench async", argv, ASYNC_BENCH_FLAGS, { command: "bench", flags: BENCH_FLAGS });
  const { settings, output } = parseAsyncBenchArgs(args);
  const { stdout, stderr } = io();
  const progress = new Progress(stderr);
  let result: AsyncBenchResult;
  try {
    result = await runAsyncBench(settings, progress);
  } catch (error) {
    throw new CommandFailure(`bench async: ${error instanceof Error ? error.message : String(error)}`);
  } finally {
    progress.done();
  }
  if (output === "json") stdout.write(`${JSON.stringify({ async: result }, null, 2)}\n`);
  else stdout.write(`${output === "markdown" ? asyncMarkdownTable(result) : asyncTextTable(result)}\n`);
  // Work lost, delivered twice or admitted past the rule is a failed bench.
  const broken = result.modes.some(
    (m) => m.groups_lost + m.groups_duplicated + m.age_rule_violations + m.capacity_violations > 0,
  );
  return broken ? 1 : 0;
}

export async function benchCommand(argv: readonly string[]): Promise<number> {
  const args = parseBench("bench", argv, BENCH_FLAGS, { command: "bench async", flags: ASYNC_BENCH_FLAGS });
  const { settings, cases, output, svgDir } = parseBenchArgs(args);
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
      const message = `${bench.mode}, ${bench.episodes} in flight, ${bench.replicas} replica(s), ${bench.latencyModel ?? "real"}: ${error instanceof Error ? error.message : String(error)}`;
      errors.push(message);
      if (cases.length > 1) progress.note(`rollgym: bench: ${message}`);
      continue;
    }
    results.push(result);
    const late = Math.max(result.metrics_answer_ms.start.engines, result.metrics_answer_ms.end.engines);
    if (late > LATE_METRICS_MS)
      progress.note(
        `rollgym: bench: the engines' /metrics answered after up to ${Math.round(late)} ms (engines short of CPU?): ` +
          "requests/s, tokens/s, engine requests per turn and CPU per request are shifted against the window",
      );
    progress.note(
      `${result.mode}, ${result.episodes_in_flight} in flight, ${result.replicas} replica(s), ${result.latency_model}: ` +
        `${result.episodes_per_s} episodes/s, ${result.requests_per_s} requests/s, server ${result.server_cpu_ms_per_request ?? "–"} ms CPU/request, ` +
        `${result.engine_requests_per_turn ?? "–"} engine requests/turn, ` +
        (result.server_over_floor
          ? `server ÷ floor raw ${result.server_over_floor.raw ?? "–"}×, undici ${result.server_over_floor.undici ?? "–"}×, `
          : "") +
        `saturation ${result.saturation_ratio ?? "–"}, ${result.episodes_finished}/${result.episodes_total} finished`,
    );
  }
  progress.done();
  if (results.length === 0) throw new CommandFailure(`bench: ${errors[0]}`);
  pairModes(results);
  if (svgDir !== null) {
    mkdirSync(svgDir, { recursive: true });
    for (const chart of svgCharts(results)) writeFileSync(join(svgDir, chart.file), chart.svg);
  }
  if (output === "json") stdout.write(`${JSON.stringify({ results }, null, 2)}\n`);
  else stdout.write(`${output === "markdown" ? markdownTable(results) : textTable(results)}\n`);
  // A case with episodes that did not finish is a failed bench.
  return errors.length === 0 && results.every((r) => r.episodes_failed === 0) ? 0 : 1;
}
