// The `rollgym` command. Usage errors print one line on stderr and exit with status 2;
// nothing is written to stdout before the inputs have been validated.
import { readFileSync } from "node:fs";
import { MockEngineUsageError, mockEngineCommand } from "../../bench/mock-engine/cli.ts";
import { EnvConfigError } from "../../envs/types.ts";
import { CommandFailure, UsageError } from "./args.ts";
import { demoCommand } from "./demo.ts";
import { envsCheck, envsList, envsPlay, envsPrompt, envsSample } from "./envs.ts";
import { filterCommand } from "./filter.ts";
import { parseCommand } from "./parse.ts";
import { rolloutCommand } from "./rollout.ts";
import { serveCommand } from "./serve.ts";

type Command = (argv: readonly string[]) => Promise<void>;

const COMMANDS: Record<string, { run: Command; usage: string }> = {
  demo: {
    run: demoCommand,
    usage: "demo [--tag TAG] [--seed N] [--prompt]    sample, solve and play puzzles",
  },
  "envs list": { run: envsList, usage: "envs list                                 one JSON line per tag" },
  "envs sample": {
    run: envsSample,
    usage: "envs sample TAG --seeds A..B [--solve]    observations (and shortest solutions) per seed",
  },
  "envs play": { run: envsPlay, usage: "envs play TAG --seed N --actions Up,Left  step an episode" },
  "envs check": {
    run: envsCheck,
    usage: "envs check [TAG...]                       run the env conformance checks",
  },
  "envs prompt": {
    run: envsPrompt,
    usage: "envs prompt TAG --seed N [--no-think]     first-turn chat messages",
  },
  parse: {
    run: parseCommand,
    usage: "parse TAG [--seed N] [--no-think] [--max-actions-per-turn N] < response",
  },
  serve: {
    run: serveCommand,
    usage:
      "serve [--port N] [--token T] [--llm URL --model M | --policy oracle|random] [key=value …]   the rollout server",
  },
  rollout: {
    run: rolloutCommand,
    usage:
      "rollout [--mode train|val] [--tag T] [--llm URL --model M | --policy oracle|random] [key=value …]",
  },
  "mock-engine": {
    run: mockEngineCommand,
    usage: "mock-engine [--port N] [--model M] [--ttft-ms MS] [--error-rate P] …   a mock vLLM server",
  },
  filter: {
    run: filterCommand,
    usage: "filter [--strategy S] [--value V] [...] < groups.json   RAGEN's group filter",
  },
};

function usage(): string {
  return ["usage: rollgym <command>", "", ...Object.values(COMMANDS).map((c) => `  rollgym ${c.usage}`)].join(
    "\n",
  );
}

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as {
    version: string;
  };
  return pkg.version;
}

async function main(argv: readonly string[]): Promise<number> {
  if (argv.length === 0 || argv[0] === "help" || argv[0] === "--help" || argv[0] === "-h") {
    process.stdout.write(`${usage()}\n`);
    return 0;
  }
  if (argv[0] === "--version") {
    process.stdout.write(`${version()}\n`);
    return 0;
  }
  const twoWords = `${argv[0]} ${argv[1] ?? ""}`;
  const [name, rest] = COMMANDS[twoWords] ? [twoWords, argv.slice(2)] : [argv[0], argv.slice(1)];
  const command = COMMANDS[name];
  if (!command) {
    const known = [...new Set(Object.keys(COMMANDS))].join(", ");
    throw new UsageError(`unknown command ${JSON.stringify(argv.slice(0, 2).join(" "))}; commands: ${known}`);
  }
  await command.run(rest);
  return 0;
}

try {
  process.exitCode = await main(process.argv.slice(2));
} catch (error) {
  if (
    error instanceof UsageError ||
    error instanceof EnvConfigError ||
    error instanceof MockEngineUsageError
  ) {
    process.stderr.write(`rollgym: ${error.message}\n`);
    process.exitCode = 2;
  } else if (error instanceof CommandFailure) {
    process.stderr.write(`rollgym: ${error.message}\n`);
    process.exitCode = 1;
  } else {
    throw error;
  }
}
