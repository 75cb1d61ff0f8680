// `rollgym sft`: supervised fine-tuning data from the built-in solvers. Each episode is played
// by the oracle (Sokoban BFS, FrozenLake shortest path, Bandit's high arm, or a chosen arm mix)
// through the same episode code as a rollout, so the conversation is RAGEN's prompts, the
// solver's <think>…</think><answer>…</answer> turns and the environment's real replies.
import { spawn } from "node:child_process";
import { once } from "node:events";
import { writeFile } from "node:fs/promises";
import { armMixPolicy, oraclePolicy } from "../llm/builtin.ts";
import type { ChatMessage } from "../llm/chat.ts";
import type { Policy, PolicyRequest, PolicyResponse } from "../llm/policy.ts";
import type { EpisodeRecord } from "../record/episode-record.ts";
import { runBatch } from "../rollout/batch.ts";
import { CommandFailure, type FlagSpec, parseArgs, parseChoice, parseNumber, UsageError } from "./args.ts";
import { isOverride, loadOrExplain, reportLoaded, setup } from "./context.ts";
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

  const early = loadOrExplain(args.lists.get("config") ?? [], args.positionals);
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
  if (request.episode.contextWindowMode !== "full")
    throw new UsageError(
      `sft: agent_proxy.context_window_mode is ${request.episode.contextWindowMode}; allowed: full (one conversation per episode)`,
    );
  const bandit = request.tags.every(({ tag }) => registry.tag(tag).type.name === "bandit");
  if (mix !== null && !bandit) {
    const other = request.tags.find(({ tag }) => registry.tag(tag).type.name !== "bandit");
    throw new UsageError(
      `--arm-mix: tag ${other?.tag} is not a bandit (env_type ${other ? registry.tag(other.tag).type.name : "?"}); allowed: bandit tags only`,
    );
  }
  reportLoaded(loaded);

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
  const examples = batch.episodes.map((e) => {
    const last = policy.last.get(e.env_id);
    if (!last) throw new Error(`episode ${e.env_id} was never asked for an answer`);
    return sftExample(e, last, bandit ? policy.highArms.get(e.env_id) : undefined);
  });
  const lines = examples.map((x) => `${JSON.stringify(x)}\n`).join("");
  if (format === "jsonl") await writeText(out, lines);
  else await writeParquet(out, lines, args.values.get("python") ?? process.env.ROLLGYM_PYTHON ?? "python3");

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
  return 0;
}

async function writeText(path: string, text: string): Promise<void> {
  try {
    await writeFile(path, text);
  } catch (error) {
    throw new CommandFailure(`--out: cannot write ${JSON.stringify(path)}: ${(error as Error).message}`);
  }
}

/** JSON lines in, one parquet file out: pyarrow infers messages as list<struct<role, content>>. */
const PARQUET_WRITER = `
import json, sys
try:
    import pyarrow as pa, pyarrow.parquet as pq
except ImportError as error:
    sys.exit(f"--format parquet needs pyarrow in {sys.executable}: {error} (pip install pyarrow, or give --python)")
rows = [json.loads(line) for line in sys.stdin if line.strip()]
pq.write_table(pa.Table.from_pylist(rows), sys.argv[1])
`;

async function writeParquet(path: string, lines: string, python: string): Promise<void> {
  const child = spawn(python, ["-c", PARQUET_WRITER, path], { stdio: ["pipe", "inherit", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (chunk) => {
    stderr += chunk;
  });
  child.stdin.end(lines);
  const [code] = (await Promise.race([
    once(child, "close"),
    once(child, "error").then(([error]) => {
      throw new UsageError(`--python: cannot run ${JSON.stringify(python)}: ${(error as Error).message}`);
    }),
  ])) as [number | null];
  if (code !== 0)
    throw new CommandFailure(
      `--format parquet: ${python} failed (exit ${code}): ${stderr.trim().split("\n").at(-1)}`,
    );
}
