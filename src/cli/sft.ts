// `rollgym sft`: supervised fine-tuning data from the built-in solvers. Each episode is played
// by the oracle (Sokoban BFS, FrozenLake shortest path, Bandit's high arm, or a chosen arm mix)
// through the same episode code as a rollout, so the conversation is RAGEN's prompts, the
// solver's <think>…</think><answer>…</answer> turns and the environment's real replies.
import { type ChildProcessByStdio, spawn } from "node:child_process";
import { once } from "node:events";
import { writeFile } from "node:fs/promises";
import type { Readable, Writable } from "node:stream";
import type { EnvRegistry } from "../../envs/registry.ts";
import { loadConfig } from "../config/index.ts";
import { armMixPolicy, oraclePolicy } from "../llm/builtin.ts";
import type { ChatMessage } from "../llm/chat.ts";
import type { Policy, PolicyRequest, PolicyResponse } from "../llm/policy.ts";
import type { EpisodeRecord } from "../record/episode-record.ts";
import { type BatchRequest, runBatch } from "../rollout/batch.ts";
import { CommandFailure, type FlagSpec, parseArgs, parseChoice, parseNumber, UsageError } from "./args.ts";
import { isOverride, reportLoaded, setup } from "./context.ts";
import { io, say } from "./io.ts";
import { ProgressBar } from "./output.ts";
import { checkedRequest, overridesFrom, ROLLOUT_FLAGS } from "./rollout.ts";

const FORMATS = ["jsonl", "parquet"] as const;
type Format = (typeof FORMATS)[number];

const SHARED = [
  "config",
  "plugin",
  "mode",
  "tag",
  "groups",
  "group-size",
  "step",
  "seed",
  "max-turn",
  "max-actions-per-turn",
  "no-think",
] as const;

export const SFT_FLAGS: Record<string, FlagSpec> = {
  ...Object.fromEntries(SHARED.map((flag) => [flag, ROLLOUT_FLAGS[flag]])),
  "arm-mix": {
    kind: "value",
    arg: "P",
    help: "Bandit tags: share of episodes that pull the high-risk arm (the oracle's); the rest pull the other (default 1)",
  },
  format: {
    kind: "value",
    arg: "F",
    help: "jsonl (default) or parquet: a `messages` column, the layout verl's multi-turn and TRL's SFT trainers read (needs pyarrow)",
  },
  python: {
    kind: "value",
    arg: "EXE",
    help: "the Python with pyarrow that writes parquet (default $ROLLGYM_PYTHON or python3)",
  },
  out: { kind: "value", arg: "FILE", help: "where to write the examples (required)" },
};

/** One SFT example: a whole conversation, and where it came from. */
export interface SftExample {
  messages: ChatMessage[];
  data_source: string;
  extra_info: {
    tag: string;
    seed: number;
    env_id: number;
    turns: number;
    success: boolean;
    reward: number;
    /** Bandit only: which arm the answer pulls. */
    arm?: "high" | "low";
  };
}

/**
 * Remembers the last prompt of every episode: with the full context window it holds the whole
 * conversation (every earlier state, answer and reward message) as the model would see it.
 */
class Recording implements Policy {
  readonly name: string;
  readonly last = new Map<number, PolicyRequest>();
  /** Bandit: the oracle's arm per episode, read before the answer moves the env on. */
  readonly highArms = new Map<number, string>();
  private readonly inner: Policy;
  private readonly bandit: boolean;

  constructor(inner: Policy, bandit: boolean) {
    this.inner = inner;
    this.name = inner.name;
    this.bandit = bandit;
  }

  generate(request: PolicyRequest): Promise<PolicyResponse> {
    this.last.set(request.episode.envId, request);
    if (this.bandit) this.highArms.set(request.episode.envId, request.episode.solve()?.[0] ?? "");
    return this.inner.generate(request);
  }
}

/** The conversation RAGEN trains on: the prompts, each answer as rebuilt, no trailing reward. */
export function sftExample(record: EpisodeRecord, lastPrompt: PolicyRequest, highArm?: string): SftExample {
  const final = record.turns.at(-1);
  if (!final) throw new Error(`episode ${record.env_id} has no turns`);
  const messages = [...lastPrompt.messages, { role: "assistant" as const, content: final.response }];
  const arm =
    highArm === undefined ? undefined : final.actions[0] === highArm ? ("high" as const) : ("low" as const);
  return {
    messages,
    data_source: record.tag,
    extra_info: {
      tag: record.tag,
      seed: record.seed,
      env_id: record.env_id,
      turns: record.turns.length,
      success: record.success,
      reward: record.reward,
      ...(arm ? { arm } : {}),
    },
  };
}

export async function sftCommand(argv: readonly string[]): Promise<number> {
  const args = parseArgs("sft", argv, SFT_FLAGS);
  for (const p of args.positionals) {
    if (!isOverride(p))
      throw new UsageError(
        `sft: unexpected argument ${JSON.stringify(p)} (overrides look like key=value or ~key)`,
      );
  }
  const out = args.values.get("out");
  if (out === undefined) throw new UsageError("sft: --out FILE is required");
  const format = parseChoice("--format", args.values.get("format") ?? "jsonl", FORMATS) as Format;
  const mixText = args.values.get("arm-mix");
  const mix = mixText === undefined ? null : parseNumber("--arm-mix", mixText);
  if (mix !== null && !(mix >= 0 && mix <= 1))
    throw new UsageError(`--arm-mix: ${mixText} is not allowed; give a share in [0, 1], e.g. 0.5`);

  const early = loadConfig({ files: args.lists.get("config") ?? [], overrides: args.positionals });
  const mode = args.values.get("mode") ?? early.config.rollgym.mode;
  const section = mode === "val" ? "val" : "train";
  // One episode per seed unless asked otherwise: demonstrations of the same seed are identical.
  const overrides = [
    `es_manager.${section}.group_size=1`,
    ...overridesFrom(args, mode, early.config.es_manager[section].env_groups),
  ];
  const { loaded, registry } = await setup(args, overrides);
  if (loaded.config.rollgym.llm.base_url !== null)
    throw new UsageError(
      "sft: the examples come from the built-in solvers; remove rollgym.llm.base_url (set by --config or key=value)",
    );
  const request = checkedRequest(loaded, registry);
  if (request.episode.context_window_mode !== "full")
    throw new UsageError(
      `sft: agent_proxy.context_window_mode is ${request.episode.context_window_mode}; allowed: full (one conversation per episode)`,
    );
  const bandit = request.tags.every(({ tag }) => registry.tag(tag).type.name === "bandit");
  if (mix !== null && !bandit) {
    const other = request.tags.find(({ tag }) => registry.tag(tag).type.name !== "bandit");
    throw new UsageError(
      `--arm-mix: tag ${other?.tag} is not a bandit (env_type ${other ? registry.tag(other.tag).type.name : "?"}); allowed: bandit tags only`,
    );
  }

  // A Python without pyarrow is a mistake in the input: found before any episode plays.
  const parquet =
    format === "parquet" ? await ParquetWriter.start(out, pythonOf(args.values.get("python"))) : null;
  try {
    reportLoaded(loaded);
    const examples = await solverExamples(registry, request, mix, bandit);
    const lines = examples.map((x) => `${JSON.stringify(x)}\n`).join("");
    if (parquet) await parquet.write(lines, examples.length);
    else await writeText(out, lines);
    report(out, format, examples, bandit);
  } finally {
    parquet?.abandon();
  }
  return 0;
}

async function solverExamples(
  registry: EnvRegistry,
  request: BatchRequest,
  mix: number | null,
  bandit: boolean,
): Promise<SftExample[]> {
  const policy = new Recording(mix === null ? oraclePolicy() : armMixPolicy(mix), bandit);
  const total = request.tags.reduce((n, t) => n + t.groups, 0) * request.groupSize;
  const bar = new ProgressBar(`sft ${request.tags.map((t) => t.tag).join("+")}`, total);
  let batch: Awaited<ReturnType<typeof runBatch>>;
  try {
    batch = await runBatch(registry, request, policy, { onEpisode: (e) => bar.tick(e.failure !== null) });
  } finally {
    bar.done();
  }
  const failed = batch.episodes.find((e) => e.failure !== null);
  if (failed) throw new CommandFailure(`episode ${failed.env_id} failed: ${failed.failure}`);
  return batch.episodes.map((e) => {
    const last = policy.last.get(e.env_id);
    if (!last) throw new Error(`episode ${e.env_id} was never asked for an answer`);
    return sftExample(e, last, bandit ? policy.highArms.get(e.env_id) : undefined);
  });
}

function report(out: string, format: Format, examples: readonly SftExample[], bandit: boolean): void {
  const solved = examples.filter((x) => x.extra_info.success).length;
  const high = examples.filter((x) => x.extra_info.arm === "high").length;
  say(
    `${examples.length} examples written to ${out} (${format}); ${solved} successful` +
      (bandit ? `, ${high} pull the high-risk arm` : ""),
  );
  // Like `export --out`: what was written, as one JSON line on stdout.
  const written = {
    out,
    format,
    examples: examples.length,
    successful: solved,
    ...(bandit ? { high_arm: high } : {}),
  };
  io().stdout.write(`${JSON.stringify(written)}\n`);
}

async function writeText(path: string, text: string): Promise<void> {
  try {
    await writeFile(path, text);
  } catch (error) {
    throw new CommandFailure(`--out: cannot write ${JSON.stringify(path)}: ${(error as Error).message}`);
  }
}

/** The Python that writes parquet, and how the user named it (for errors). */
interface Python {
  exe: string;
  named: string;
}

function pythonOf(flag: string | undefined): Python {
  if (flag !== undefined) return { exe: flag, named: `--python ${flag}` };
  const env = process.env.ROLLGYM_PYTHON;
  if (env !== undefined && env !== "") return { exe: env, named: `ROLLGYM_PYTHON=${env}` };
  return { exe: "python3", named: "python3" };
}

/** Exit status of the writer when pyarrow does not import. */
const NO_PYARROW = 3;

/**
 * JSON lines in, one parquet file out: pyarrow infers messages as list<struct<role, content>>.
 * It says "ready" once pyarrow is imported; its first line in is the row count, so a rollgym that
 * stops before sending every row (killed: the pipe closes) leaves no partial file.
 */
const PARQUET_WRITER = `
import json, sys
try:
    import pyarrow as pa, pyarrow.parquet as pq
except ImportError as error:
    print(error, file=sys.stderr)
    sys.exit(${NO_PYARROW})
print("ready", flush=True)
expected = sys.stdin.readline()
if not expected:
    sys.exit(0)
rows = [json.loads(line) for line in sys.stdin if line.strip()]
if len(rows) != int(expected):
    sys.exit(f"received {len(rows)} of {int(expected)} rows; nothing written")
pq.write_table(pa.Table.from_pylist(rows), sys.argv[1])
`;

/** The Python child that writes --format parquet, started (and checked) before the episodes play. */
class ParquetWriter {
  private readonly child: ChildProcessByStdio<Writable, Readable, Readable>;
  private readonly python: Python;
  /** How it ended, in words ("" for a clean exit); a failure to start is `spawnError`. */
  private readonly ended: Promise<string>;
  private spawnError: string | null = null;
  private stderr = "";

  private constructor(path: string, python: Python) {
    this.python = python;
    this.child = spawn(python.exe, ["-c", PARQUET_WRITER, path], { stdio: ["pipe", "pipe", "pipe"] });
    // A writer that exits early closes the pipe under our write (EPIPE): its exit status says why.
    this.child.stdin.on("error", () => {});
    this.child.stderr.setEncoding("utf8").on("data", (text: string) => {
      this.stderr = (this.stderr + text).slice(-4000);
    });
    this.ended = new Promise((resolve) => {
      this.child.once("error", (error: NodeJS.ErrnoException) => {
        this.spawnError =
          error.code === "ENOENT"
            ? "no such file"
            : error.code === "EACCES"
              ? "not executable"
              : error.message;
        resolve(this.spawnError);
      });
      this.child.once("close", (code, signal) =>
        resolve(code === 0 ? "" : signal ? `killed by ${signal}` : `exit ${code}`),
      );
    });
  }

  /** Resolves once pyarrow is imported; a usage error naming the fix when it cannot be. */
  static async start(path: string, python: Python): Promise<ParquetWriter> {
    const writer = new ParquetWriter(path, python);
    const ready = once(writer.child.stdout, "data").then(() => null);
    const ended = await Promise.race([ready, writer.ended]);
    if (ended === null) return writer;
    if (writer.spawnError !== null) throw new UsageError(`${python.named}: ${writer.spawnError}`);
    if (writer.child.exitCode === NO_PYARROW)
      throw new UsageError(
        `--format parquet needs pyarrow, which ${python.named} lacks (${writer.lastLine()}): ` +
          `run ${python.exe} -m pip install pyarrow, or give --python EXE of a Python that has it`,
      );
    throw new UsageError(
      `${python.named}: ${ended || "exited"} before it could write parquet; is it a Python 3? ${writer.lastLine()}`.trim(),
    );
  }

  async write(lines: string, rows: number): Promise<void> {
    this.child.stdin.end(`${rows}\n${lines}`);
    const ended = await this.ended;
    if (ended !== "")
      throw new CommandFailure(
        `--format parquet: ${this.python.named} failed (${ended}): ${this.lastLine()}`,
      );
  }

  /** Lets a writer still waiting for rows exit without writing (the command failed first). */
  abandon(): void {
    if (!this.child.stdin.writableEnded) this.child.stdin.end();
  }

  private lastLine(): string {
    return this.stderr.trim().split("\n").at(-1) ?? "";
  }
}
