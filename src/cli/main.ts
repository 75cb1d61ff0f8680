// The `rollgym` command. Usage errors print one line on stderr and exit with status 2;
// nothing is written to stdout before the inputs have been validated. `run` is the whole
// command in process (tests call it with their own streams); importing this file runs nothing.
import { readFileSync } from "node:fs";
import { exitStatus } from "../errors/boundary.ts";
import { mockEngineCommand, mockEngineUsage } from "../mock-engine/cli.ts";
import { type FlagSpec, formatHelp, UsageError, wantsHelp } from "./args.ts";
import {
  ASYNC_BENCH_DETAILS,
  ASYNC_BENCH_FLAGS,
  asyncBenchCommand,
  BENCH_DETAILS,
  BENCH_FLAGS,
  benchCommand,
} from "./bench.ts";
import { DEMO_FLAGS, demoCommand } from "./demo.ts";
import {
  CHECK_FLAGS,
  envsCheck,
  envsList,
  envsPlay,
  envsPrompt,
  envsSample,
  LIST_FLAGS,
  PLAY_FLAGS,
  PROMPT_FLAGS,
  SAMPLE_FLAGS,
} from "./envs.ts";
import { EXPORT_FLAGS, exportCommand } from "./export.ts";
import { FILTER_FLAGS, filterCommand } from "./filter.ts";
import { type CliStreams, io, say, withStreams } from "./io.ts";
import { tieToParent } from "./lifeline.ts";
import { PARSE_FLAGS, parseCommand } from "./parse.ts";
import { ROLLOUT_FLAGS, rolloutCommand } from "./rollout.ts";
import { SERVE_FLAGS, serveCommand, tuneServeProcess } from "./serve.ts";
import { SFT_FLAGS, sftCommand } from "./sft.ts";
import { SHOW_FLAGS, showCommand } from "./show.ts";

interface Command {
  /** Resolves to the exit status (nothing = 0). */
  run: (argv: readonly string[]) => Promise<unknown>;
  /** What follows `rollgym` in the usage line. */
  synopsis: string;
  /** One line for the command list. */
  summary: string;
  /** More for the command's own help. */
  details?: string;
  flags: Record<string, FlagSpec>;
  /** A help text of the command's own (mock-engine). */
  help?: () => string;
}

const COMMANDS: Record<string, Command> = {
  "envs list": {
    run: envsList,
    synopsis: "envs list [--config FILE] [--plugin MODULE] [key=value …]",
    summary: "One JSON line per tag: {tag, env_type, config} (the resolved env config).",
    flags: LIST_FLAGS,
  },
  "envs sample": {
    run: envsSample,
    synopsis: "envs sample TAG --seeds A..B [--solve] [key=value …]",
    summary: "Observations (and shortest solutions) per seed, one JSON line each.",
    flags: SAMPLE_FLAGS,
  },
  "envs play": {
    run: envsPlay,
    synopsis: "envs play TAG --seed N [--actions Up,Left] [key=value …]",
    summary: "Steps an episode: a JSON line per action, or a game on a terminal.",
    details:
      "With --actions, one JSON line per executed action, stopping after the one that ends the episode.\n" +
      "Without it, on a terminal: an interactive game (arrow keys/WASD or digits, u undo, r reset, q quit).",
    flags: PLAY_FLAGS,
  },
  "envs prompt": {
    run: envsPrompt,
    synopsis: "envs prompt TAG --seed N [--no-think] [--ragen-vocabulary] [key=value …]",
    summary: "The first-turn system and user messages, before any chat template.",
    flags: PROMPT_FLAGS,
  },
  "envs check": {
    run: envsCheck,
    synopsis: "envs check [TAG …] [key=value …]",
    summary: "Runs the env conformance checks on the tags (default: all); exit 1 if any fails.",
    flags: CHECK_FLAGS,
  },
  parse: {
    run: parseCommand,
    synopsis: "parse TAG [--seed N] [--no-think] [--max-actions-per-turn N] [--action-sep S] < response",
    summary: "How RAGEN parses one model response read on stdin.",
    details: "Prints {parsed, actions, llm_response, format_penalty} exactly as RAGEN decides them.",
    flags: PARSE_FLAGS,
  },
  filter: {
    run: filterCommand,
    synopsis: "filter [--strategy S] [--value V] […] < groups.json",
    summary: "RAGEN's group filter on a JSON array of groups (each an array of episode scores).",
    flags: FILTER_FLAGS,
  },
  rollout: {
    run: rolloutCommand,
    synopsis:
      "rollout [--mode train|val] [--tag T,… --groups N,…] [--llm URL --model M | --policy oracle|random] [--config FILE …] [key=value …] [--out FILE]",
    summary: "Plays a batch of env groups and prints RAGEN-named metrics.",
    details:
      "Config keys are RAGEN's (docs/configuration.md); flags are shorthands for them. SIGINT/SIGTERM\n" +
      "stop the rollout: finished episodes are kept (in --out) and their metrics printed; a second\n" +
      "signal exits at once.",
    flags: ROLLOUT_FLAGS,
  },
  serve: {
    run: serveCommand,
    synopsis:
      "serve [--port N] [--token T] [--llm URL --model M | --policy oracle|random] [--config FILE …] [key=value …]",
    summary: "The rollout server and its web page: WebSocket /v1/rollouts, /, /healthz, /metrics, /v1/envs.",
    flags: SERVE_FLAGS,
  },
  sft: {
    run: sftCommand,
    synopsis:
      "sft --tag T --out FILE [--groups N] [--seed N] [--arm-mix P] [--format jsonl|parquet] [--config FILE …] [key=value …]",
    summary: "SFT data from the built-in solvers: one RAGEN conversation per episode (chat messages).",
    details:
      "Each line (or parquet row) is {messages, data_source, extra_info}: RAGEN's prompts, the solver's\n" +
      "<think>…</think><answer>…</answer> turns and the env's replies. Parquet is the layout verl's multi-turn\n" +
      "SFT (data.multiturn.messages_key=messages) and TRL's SFTTrainer (conversational) read.",
    flags: SFT_FLAGS,
  },
  show: {
    run: showCommand,
    synopsis: "show FILE [--group N,…] [--episode N,…] [--outcome solved|unsolved|failed] [--tag T,…]",
    summary: "Prints an episode file (rollout --out) turn by turn: board, response, actions, reward.",
    flags: SHOW_FLAGS,
  },
  export: {
    run: exportCommand,
    synopsis: "export FILE [--format html|svg] [--group N,…] [--out PATH]",
    summary: "An episode file as a self-contained HTML page or an SVG image strip, to share.",
    flags: EXPORT_FLAGS,
  },
  "mock-engine": {
    run: mockEngineCommand,
    synopsis: "mock-engine [--port N] [--model M] [--latency-model none|default|slow10x] [--error-rate P] …",
    summary: "A mock vLLM server (OpenAI dialect, latency model, fault injection).",
    flags: {},
    help: mockEngineUsage,
  },
  bench: {
    run: benchCommand,
    synopsis:
      "bench [--episodes N,…] [--replicas 1,2,4] [--latency-model default|slow10x|none] [--mode chat,tokens] [--duration S] [--llm URL[,URL…] --model M] [--server URL] [--no-floor] [--json|--markdown] [--svg DIR]",
    summary: "Load test: server + engines driven over the WebSocket protocol; throughput, CPU, lag, RSS.",
    details: BENCH_DETAILS,
    flags: BENCH_FLAGS,
  },
  "bench async": {
    run: asyncBenchCommand,
    synopsis:
      "bench async [--steps N] [--groups-per-step N] [--staleness S,…] [--step-time S] [--pause-mode keep|wait|abort] [--response-tokens lognormal:MEDIAN:P99] [--json|--markdown]",
    summary: "A simulated trainer's seconds per training step, sync against async (max_staleness).",
    details: ASYNC_BENCH_DETAILS,
    flags: ASYNC_BENCH_FLAGS,
  },
  demo: {
    run: demoCommand,
    synopsis: "demo [--tag TAG] [--seed N] [--prompt]",
    summary: "Samples, solves and plays a puzzle per env family.",
    flags: DEMO_FLAGS,
  },
};

/** Commands of two words, by their first word (`envs`, `bench`). */
const GROUPS = new Set(
  Object.keys(COMMANDS).flatMap((name) => (name.includes(" ") ? [name.split(" ")[0]] : [])),
);

/** Old spellings still taken, each with a line on stderr naming the new one. */
const FLAG_ALIASES: Record<string, { flag: string; command: string }> = {
  bench: { flag: "--async", command: "bench async" },
};

function usage(group?: string): string {
  const names = Object.keys(COMMANDS).filter((name) => !group || name.startsWith(`${group} `));
  const width = Math.max(...names.map((n) => n.length));
  return [
    `usage: rollgym ${group ? `${group} <subcommand>` : "<command>"} [options]`,
    "",
    ...names.map((name) => `  rollgym ${name.padEnd(width)}  ${COMMANDS[name].summary}`),
    "",
    `rollgym ${group ? `${group} <subcommand>` : "<command>"} --help prints the options of one command.`,
  ].join("\n");
}

function helpOf(name: string): string {
  const command = COMMANDS[name];
  if (command.help) return command.help();
  const about = command.details ? `${command.summary}\n${command.details}` : command.summary;
  return formatHelp(command.synopsis, about, command.flags);
}

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as {
    version: string;
  };
  return pkg.version;
}

async function dispatch(argv: readonly string[]): Promise<number> {
  const { stdout, stderr } = io();
  const [first, second] = argv;
  // No command is a usage error: the usage goes to stderr, whole.
  const usageError = (group?: string): number => {
    stderr.write(`${usage(group)}\n`);
    return 2;
  };
  if (first === undefined) return usageError();
  if (first === "help" || first === "--help" || first === "-h") {
    const topic = argv.slice(1).join(" ");
    if (topic !== "" && !COMMANDS[topic] && !GROUPS.has(topic)) {
      throw new UsageError(
        `help: unknown command ${JSON.stringify(topic)}; commands: ${Object.keys(COMMANDS).join(", ")}`,
      );
    }
    stdout.write(`${COMMANDS[topic] ? helpOf(topic) : usage(GROUPS.has(topic) ? topic : undefined)}\n`);
    return 0;
  }
  if (first === "--version") {
    stdout.write(`${version()}\n`);
    return 0;
  }
  const alias = FLAG_ALIASES[first];
  const aliased = alias ? argv.indexOf(alias.flag) : -1;
  if (alias && aliased > 0 && (argv.indexOf("--") < 0 || aliased < argv.indexOf("--"))) {
    say(`${first} ${alias.flag} is now \`rollgym ${alias.command}\`; running that`);
    return runCommand(
      alias.command,
      argv.slice(1).filter((_, i) => i !== aliased - 1),
    );
  }
  if (GROUPS.has(first)) {
    const name = `${first} ${second ?? ""}`;
    if (COMMANDS[name]) return runCommand(name, argv.slice(2));
    // A command that also has subcommands (bench, bench async) runs itself when none is named.
    if (COMMANDS[first] && (second === undefined || second.startsWith("-")))
      return runCommand(first, argv.slice(1));
    if (second === undefined) return usageError(first);
    if (second === "--help" || second === "-h") {
      stdout.write(`${usage(first)}\n`);
      return 0;
    }
    const known = Object.keys(COMMANDS).filter((n) => n === first || n.startsWith(`${first} `));
    throw new UsageError(`unknown command ${JSON.stringify(name)}; ${first} commands: ${known.join(", ")}`);
  }
  if (!COMMANDS[first]) {
    const known = [...GROUPS, ...Object.keys(COMMANDS).filter((n) => !n.includes(" "))];
    throw new UsageError(`unknown command ${JSON.stringify(first)}; commands: ${known.join(", ")}`);
  }
  return runCommand(first, argv.slice(1));
}

async function runCommand(name: string, argv: readonly string[]): Promise<number> {
  if (wantsHelp(argv)) {
    io().stdout.write(`${helpOf(name)}\n`);
    return 0;
  }
  const status = await COMMANDS[name].run(argv);
  return typeof status === "number" ? status : 0;
}

/**
 * Runs `rollgym ARGV` and resolves to its exit status. Errors that are not the input's fault
 * (bugs) are thrown, with their stack.
 */
export async function run(argv: readonly string[], streams?: CliStreams): Promise<number> {
  const go = async (): Promise<number> => {
    try {
      return await dispatch(argv);
    } catch (error) {
      const code = exitStatus(error);
      if (code === null) throw error;
      say((error as Error).message);
      return code;
    }
  };
  return streams ? withStreams(streams, go) : go();
}

/** The `rollgym` program: the process's arguments and streams, its exit code. */
export async function runMain(): Promise<void> {
  // A closed pipe (`… | head -1`) ends the output: stop quietly, as `cat` would.
  process.stdout.on("error", (error: NodeJS.ErrnoException) => {
    if (error.code === "EPIPE") process.exit(0);
    throw error;
  });
  const argv = process.argv.slice(2);
  // A server runs as started, or, asked for, with its measured memory settings (runtime.ts),
  // which may re-execute in place: before anything else has run.
  if (argv[0] === "serve" && !wantsHelp(argv)) tuneServeProcess(argv.slice(1));
  // Started through npm or by a parent that asks for it: end with it (lifeline.ts).
  tieToParent();
  process.exitCode = await run(argv);
}

if (import.meta.main) await runMain();
