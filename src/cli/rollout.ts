// `rollgym rollout`: play a batch of env groups against a model (or a built-in policy) and
// print RAGEN-named metrics; optionally write every turn to an episode file.
import { readFileSync } from "node:fs";
import { createRegistry } from "../../envs/catalog.ts";
import type { EnvRegistry } from "../../envs/registry.ts";
import { ConfigError, loadConfig, type RollgymConfig } from "../config/index.ts";
import { oraclePolicy, randomPolicy } from "../llm/builtin.ts";
import { ChatPolicy } from "../llm/openai-chat.ts";
import { type Policy, PolicyError } from "../llm/policy.ts";
import { writeEpisodeFile } from "../record/episode-file.ts";
import { type BatchRequest, runBatch, validateBatchRequest } from "../rollout/batch.ts";
import { batchRequest } from "../rollout/request.ts";
import { CommandFailure, type FlagSpec, parseArgs, UsageError } from "./args.ts";
import { LineWriter, ProgressBar } from "./output.ts";

// Each flag is sugar for one or more config overrides, so the config stays the one source of truth.
const FLAGS: Record<string, FlagSpec & { keys?: (mode: string) => string[] }> = {
  config: { kind: "value", help: "a YAML config file (RAGEN key names); may be given more than once" },
  mode: { kind: "value", help: "train|val", keys: () => ["rollgym.mode"] },
  tag: { kind: "value", help: "tags to play, comma-separated (RAGEN's env_configs.tags)" },
  groups: { kind: "value", help: "groups per tag, comma-separated (RAGEN's n_groups)" },
  "group-size": { kind: "value", help: "episodes per group", keys: (m) => [`es_manager.${m}.group_size`] },
  step: {
    kind: "value",
    help: "RAGEN training step for the train seed schedule",
    keys: () => ["rollgym.step"],
  },
  seed: { kind: "value", help: "explicit seed of group 0", keys: () => ["rollgym.seed"] },
  llm: {
    kind: "value",
    help: "OpenAI-compatible base URL, e.g. http://gpu:8000/v1; comma-separated for replicas",
    keys: () => ["rollgym.llm.base_url"],
  },
  model: { kind: "value", help: "model name served at --llm", keys: () => ["rollgym.llm.model"] },
  "api-key": {
    kind: "value",
    help: "API key (default $OPENAI_API_KEY)",
    keys: () => ["rollgym.llm.api_key"],
  },
  concurrency: {
    kind: "value",
    help: "requests in flight per endpoint",
    keys: () => ["rollgym.llm.concurrency"],
  },
  timeout: { kind: "value", help: "request timeout in seconds", keys: () => ["rollgym.llm.timeout_s"] },
  retries: {
    kind: "value",
    help: "cap on retries per turn (default: none, the time budget decides)",
    keys: () => ["rollgym.llm.max_retries"],
  },
  "retry-budget": {
    kind: "value",
    help: "seconds one turn may spend retrying, e.g. through an engine restart (300)",
    keys: () => ["rollgym.llm.retry_budget_s"],
  },
  policy: {
    kind: "value",
    help: "built-in policy when no --llm: oracle|random",
    keys: () => ["rollgym.policy.name"],
  },
  noise: {
    kind: "value",
    help: "probability of a random answer (built-in policies)",
    keys: () => ["rollgym.policy.noise"],
  },
  malformed: {
    kind: "value",
    help: "probability of a malformed answer (built-in)",
    keys: () => ["rollgym.policy.malformed"],
  },
  "max-turn": { kind: "value", help: "turns per episode", keys: () => ["agent_proxy.max_turn"] },
  "max-actions-per-turn": {
    kind: "value",
    help: "actions kept per turn",
    keys: () => ["agent_proxy.max_actions_per_turn"],
  },
  "no-think": { kind: "switch", help: "answer-only format (enable_think false)" },
  tokens: {
    kind: "switch",
    help: "token in, token out: keep each episode's exact token ids, loss mask and logprobs (needs --llm)",
  },
  temperature: {
    kind: "value",
    help: "sampling temperature",
    keys: (m) => [
      m === "val"
        ? "actor_rollout_ref.rollout.val_kwargs.temperature"
        : "actor_rollout_ref.rollout.temperature",
    ],
  },
  "top-p": {
    kind: "value",
    help: "nucleus sampling",
    keys: (m) => [
      m === "val" ? "actor_rollout_ref.rollout.val_kwargs.top_p" : "actor_rollout_ref.rollout.top_p",
    ],
  },
  "top-k": {
    kind: "value",
    help: "top-k sampling (-1 off)",
    keys: (m) => [
      m === "val" ? "actor_rollout_ref.rollout.val_kwargs.top_k" : "actor_rollout_ref.rollout.top_k",
    ],
  },
  "min-p": { kind: "value", help: "min-p sampling", keys: () => ["actor_rollout_ref.rollout.min_p"] },
  "max-tokens": {
    kind: "value",
    help: "tokens per response",
    keys: () => ["actor_rollout_ref.rollout.response_length"],
  },
  strategy: {
    kind: "value",
    help: "filter strategy",
    keys: () => ["actor_rollout_ref.rollout.rollout_filter_strategy"],
  },
  value: {
    kind: "value",
    help: "filter value",
    keys: () => ["actor_rollout_ref.rollout.rollout_filter_value"],
  },
  "top-p-mode": {
    kind: "value",
    help: "linear|softmax",
    keys: () => ["actor_rollout_ref.rollout.rollout_filter_top_p_prob_mode"],
  },
  type: {
    kind: "value",
    help: "largest|smallest",
    keys: () => ["actor_rollout_ref.rollout.rollout_filter_type"],
  },
  "include-zero": {
    kind: "value",
    help: "true|false",
    keys: () => ["actor_rollout_ref.rollout.rollout_filter_include_zero"],
  },
  metric: {
    kind: "value",
    help: "reward_variance|reward|reward_sum",
    keys: () => ["actor_rollout_ref.rollout.rollout_filter_metric"],
  },
  out: { kind: "value", help: "write every turn of every episode to this file (JSON lines)" },
  json: { kind: "switch", help: "print the summary as one JSON object" },
  timings: { kind: "switch", help: "add wall-clock timings to the episode file header" },
};

/** Translate flags and positional key=value overrides into config overrides, in order. */
function overridesFrom(args: ReturnType<typeof parseArgs>, mode: string, configuredGroups: number): string[] {
  const overrides: string[] = [];
  for (const [flag, spec] of Object.entries(FLAGS)) {
    const value = args.values.get(flag);
    if (value !== undefined && spec.keys)
      for (const key of spec.keys(mode)) overrides.push(`${key}=${value}`);
  }
  if (args.switches.has("no-think")) overrides.push("agent_proxy.enable_think=false");
  if (args.switches.has("tokens")) overrides.push("rollgym.tokens=true");
  const tags = args.values.get("tag");
  const groups = args.values.get("groups");
  if (tags !== undefined || groups !== undefined) {
    if (tags === undefined) throw new UsageError("--groups needs --tag");
    const tagList = tags.split(",").map((t) => t.trim());
    if (groups === undefined && tagList.length > 1) {
      throw new UsageError(`--tag lists ${tagList.length} tags; give --groups with one count per tag`);
    }
    // One tag without --groups plays the configured number of groups (RAGEN: 8 train, 512 val).
    const groupList =
      groups === undefined ? [String(configuredGroups)] : groups.split(",").map((g) => g.trim());
    if (groupList.length !== tagList.length) {
      throw new UsageError(
        `--groups: ${groupList.length} counts for ${tagList.length} tags; give one count per tag`,
      );
    }
    if (groupList.some((g) => !/^\d+$/.test(g) || Number(g) < 1)) {
      throw new UsageError(`--groups: ${JSON.stringify(groups)} is not a list of positive integers`);
    }
    const total = groupList.reduce((n, g) => n + Number(g), 0);
    overrides.push(
      `es_manager.${mode}.env_configs.tags=[${tagList.join(",")}]`,
      `es_manager.${mode}.env_configs.n_groups=[${groupList.join(",")}]`,
      `es_manager.${mode}.env_groups=${total}`,
    );
  }
  return [...overrides, ...args.positionals];
}

export function buildRegistry(config: RollgymConfig): EnvRegistry {
  const registry = createRegistry();
  for (const [tag, spec] of Object.entries(config.custom_envs)) {
    registry.registerTag({ tag, ...spec } as Parameters<EnvRegistry["registerTag"]>[0]);
  }
  return registry;
}

/**
 * The configured policy, with remote endpoints checked first: a model they do not serve is a
 * usage error (exit 2), endpoints that do not answer a failure (exit 1), each one line.
 */
export async function readyPolicy(config: RollgymConfig): Promise<Policy> {
  const policy = buildPolicy(config);
  if (policy instanceof ChatPolicy) {
    try {
      const info = await policy.preflight();
      const limit =
        info.contextLength === null
          ? "unknown context length: prompts are sent whole"
          : `context ${info.contextLength} tokens`;
      process.stderr.write(
        `rollgym: ${info.dialect} engine at ${config.rollgym.llm.base_url?.join(", ")}, ${limit}\n`,
      );
    } catch (error) {
      await policy.close();
      if (error instanceof PolicyError) {
        if (error.message.startsWith("cannot reach")) throw new CommandFailure(error.message);
        throw new UsageError(error.message);
      }
      throw error;
    }
  }
  return policy;
}

function readGrammar(file: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch (error) {
    throw new UsageError(
      `rollgym.llm.grammar: cannot read ${file}: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
}

function buildPolicy(config: RollgymConfig): Policy {
  const { llm, policy } = config.rollgym;
  if (llm.base_url) {
    if (!llm.model) throw new UsageError("--llm needs --model (rollgym.llm.model)");
    return new ChatPolicy({
      baseURL: llm.base_url,
      model: llm.model,
      apiKey: llm.api_key,
      concurrency: llm.concurrency,
      timeoutMs: llm.timeout_s * 1000,
      retryBudgetMs: llm.retry_budget_s * 1000,
      maxRetries: llm.max_retries,
      prefill: llm.prefill,
      dialect: llm.dialect,
      extraBody: llm.extra_body ?? undefined,
      grammar: llm.grammar === null ? null : readGrammar(llm.grammar),
      maxModelLen: config.actor_rollout_ref.rollout.max_model_len,
    });
  }
  const options = { noise: policy.noise, malformed: policy.malformed };
  return policy.name === "random" ? randomPolicy(options) : oraclePolicy(options);
}

export async function rolloutCommand(argv: readonly string[]): Promise<void> {
  const args = parseArgs("rollout", argv, FLAGS);
  for (const p of args.positionals) {
    if (!p.includes("="))
      throw new UsageError(
        `rollout: unexpected argument ${JSON.stringify(p)} (overrides look like key=value)`,
      );
  }
  const files = args.values.has("config") ? [args.values.get("config")!] : [];
  // The mode decides which es_manager section --tag and friends address.
  const early = loadOrExplain(files, args.positionals);
  const mode = args.values.get("mode") ?? early.config.rollgym.mode;
  const { config, ignored, notices } = loadOrExplain(
    files,
    overridesFrom(args, mode, early.config.es_manager[mode === "val" ? "val" : "train"].env_groups),
  );
  for (const key of ignored) process.stderr.write(`rollgym: ignoring trainer-only key ${key}\n`);
  for (const notice of notices) process.stderr.write(`rollgym: ${notice}\n`);
  if (config.rollgym.max_obs_length !== null) {
    // Counting observation tokens needs the model's tokenizer, which rollouts over chat do not have.
    process.stderr.write(
      `rollgym: rollgym.max_obs_length=${config.rollgym.max_obs_length} has no effect: observations are never cut (RAGEN's renders are far below old RAGEN's limits)\n`,
    );
  }

  let registry: EnvRegistry;
  let request: BatchRequest;
  try {
    registry = buildRegistry(config);
    request = batchRequest(config);
    for (const { tag } of request.tags) registry.tag(tag);
    validateBatchRequest(request);
    if (request.tokens && !config.rollgym.llm.base_url)
      throw new RangeError("--tokens (rollgym.tokens) needs a remote engine: give --llm URL --model M");
  } catch (error) {
    throw new UsageError(error instanceof Error ? error.message : String(error));
  }
  const policy = await readyPolicy(config);

  const total = request.tags.reduce((n, t) => n + t.groups, 0) * request.groupSize;
  const bar = new ProgressBar(`${request.mode} ${request.tags.map((t) => t.tag).join("+")}`, total);
  const started = Date.now();
  const batch = await runBatch(registry, request, policy, {
    onEpisode: (record) => bar.tick(record.failure !== null),
  });
  bar.done();

  const out = args.values.get("out");
  if (out) {
    const timings = args.switches.has("timings")
      ? { started: new Date(started).toISOString(), seconds: (Date.now() - started) / 1000 }
      : undefined;
    await writeEpisodeFile(
      out,
      {
        mode: request.mode,
        seed: request.seed,
        group_size: request.groupSize,
        tags: [...request.tags],
        policy: policy.name,
        settings: {
          episode: request.episode,
          sampling: request.sampling,
          filter: request.filter,
          normalization: request.normalization,
        },
        ...(timings ? { timings } : {}),
      },
      batch,
    );
  }
  const failures = batch.episodes.filter((e) => e.failure !== null);
  for (const e of failures.slice(0, 5))
    process.stderr.write(`rollgym: episode ${e.env_id} (${e.tag}, seed ${e.seed}) failed: ${e.failure}\n`);
  if (failures.length > 5)
    process.stderr.write(`rollgym: … and ${failures.length - 5} more failed episodes\n`);

  const writer = new LineWriter();
  if (args.switches.has("json")) {
    await writer.line({ metrics: batch.metrics, episodes: batch.episodes.length, failed: batch.failed });
  } else {
    const keys = Object.keys(batch.metrics);
    const width = Math.max(...keys.map((k) => k.length));
    const rows = keys.map((k) => `${k.padEnd(width)}  ${formatMetric(batch.metrics[k])}`);
    process.stdout.write(
      `${rows.join("\n")}\n\n${batch.episodes.length} episodes, ${batch.failed} failed, ` +
        `${batch.groups.filter((g) => g.kept).length}/${batch.groups.length} groups kept, seed ${request.seed}` +
        `${out ? `, episodes written to ${out}` : ""}\n`,
    );
  }
  await writer.flush();
  await policy.close?.();
  // Filtering does not count: a group the filter dropped still played.
  if (batch.groups.length > 0 && batch.groups.every((g) => g.failed)) {
    const first = batch.episodes.find((e) => e.failure !== null)?.failure ?? "unknown";
    throw new CommandFailure(`every group failed (first failure: ${first})`);
  }
}

function formatMetric(value: number): string {
  return Number.isInteger(value) ? String(value) : value.toFixed(4);
}

export function loadOrExplain(files: string[], overrides: readonly string[]): ReturnType<typeof loadConfig> {
  try {
    return loadConfig({ files, overrides });
  } catch (error) {
    if (error instanceof ConfigError) throw new UsageError(error.message);
    throw error;
  }
}
