// `rollgym rollout`: play a batch of env groups against a model (or a built-in policy) and
// print RAGEN-named metrics; optionally write every turn to an episode file.
import { accessSync, constants, readFileSync, statSync } from "node:fs";
import { constants as os } from "node:os";
import { dirname, resolve } from "node:path";
import type { EnvRegistry } from "../../envs/registry.ts";
import { type LoadedConfig, loadConfig, originOf, type RollgymConfig } from "../config/index.ts";
import { oraclePolicy, randomPolicy } from "../llm/builtin.ts";
import { extraBodyProblem } from "../llm/extra-body.ts";
import { ChatPolicy, TOKENS_NEED_ENGINE_ROUTES } from "../llm/openai-chat.ts";
import { describeEngineStatus, type Policy } from "../llm/policy.ts";
import { logprobsSource, logprobsWarning } from "../llm/token-engine.ts";
import { EpisodeFileWriter } from "../record/episode-file.ts";
import type { BatchResult } from "../record/episode-record.ts";
import { type BatchRequest, policyRefusal, runBatch, validateBatchRequest } from "../rollout/batch.ts";
import { filterNote } from "../rollout/filter.ts";
import { checkRolloutShape, isShapeRefusal } from "../rollout/limits.ts";
import { resolveRequest } from "../rollout/request.ts";
import { CommandFailure, type FlagSpec, keyFlag, type ParsedArgs, parseArgs, UsageError } from "./args.ts";
import { CONFIG_FLAGS, isOverride, reportLoaded, setup } from "./context.ts";
import { io, say } from "./io.ts";
import { LineWriter, ProgressBar } from "./output.ts";

const R = "actor_rollout_ref.rollout";
const byMode = (name: string) => (mode: string) => [
  mode === "val" ? `${R}.val_kwargs.${name}` : `${R}.${name}`,
];

// Each flag is sugar for one or more config overrides, so the config stays the one source of
// truth; a flag that sets one key takes its help from the key's schema.
export const ROLLOUT_FLAGS: Record<string, FlagSpec & { keys?: (mode: string) => string[] }> = {
  ...CONFIG_FLAGS,
  mode: keyFlag(() => ["rollgym.mode"]),
  tag: { kind: "value", arg: "T,…", help: "tags to play, comma-separated (RAGEN's env_configs.tags)" },
  groups: { kind: "value", arg: "N,…", help: "groups per tag, comma-separated (RAGEN's n_groups)" },
  "group-size": keyFlag((m) => [`es_manager.${m}.group_size`], { arg: "N" }),
  step: keyFlag(() => ["rollgym.step"], { arg: "N" }),
  seed: keyFlag(() => ["rollgym.seed"], { arg: "N" }),
  llm: {
    ...keyFlag(() => ["rollgym.llm.base_url"], { arg: "URL" }),
    help: "OpenAI-compatible base URL, e.g. http://gpu:8000/v1; comma-separated for replicas (rollgym.llm.base_url)",
  },
  model: keyFlag(() => ["rollgym.llm.model"], { arg: "M" }),
  "api-key": keyFlag(() => ["rollgym.llm.api_key"]),
  concurrency: keyFlag(() => ["rollgym.llm.concurrency"]),
  timeout: keyFlag(() => ["rollgym.llm.timeout_s"]),
  retries: keyFlag(() => ["rollgym.llm.max_retries"]),
  "retry-budget": keyFlag(() => ["rollgym.llm.retry_budget_s"]),
  policy: keyFlag(() => ["rollgym.policy.name"]),
  noise: keyFlag(() => ["rollgym.policy.noise"]),
  malformed: keyFlag(() => ["rollgym.policy.malformed"]),
  "max-turn": keyFlag(() => ["agent_proxy.max_turn"]),
  "max-actions-per-turn": keyFlag(() => ["agent_proxy.max_actions_per_turn"]),
  "no-think": { kind: "switch", help: "answer-only format (enable_think false)" },
  tokens: {
    kind: "switch",
    help: "token in, token out: keep each episode's exact token ids, loss mask and logprobs (needs --llm)",
  },
  temperature: keyFlag(byMode("temperature")),
  "top-p": keyFlag(byMode("top_p")),
  "top-k": keyFlag(byMode("top_k")),
  "min-p": keyFlag(() => [`${R}.min_p`]),
  "max-tokens": keyFlag(() => [`${R}.response_length`]),
  strategy: keyFlag(() => [`${R}.rollout_filter_strategy`]),
  value: keyFlag(() => [`${R}.rollout_filter_value`]),
  "top-p-mode": keyFlag(() => [`${R}.rollout_filter_top_p_prob_mode`]),
  type: keyFlag(() => [`${R}.rollout_filter_type`]),
  "include-zero": keyFlag(() => [`${R}.rollout_filter_include_zero`], { arg: "true|false" }),
  metric: keyFlag(() => [`${R}.rollout_filter_metric`]),
  out: {
    kind: "value",
    arg: "FILE",
    help: "write every turn of every episode to this file (JSON lines; `rollgym show FILE` prints it)",
  },
  force: { kind: "switch", help: "let --out replace a file that already has content" },
  json: { kind: "switch", help: "print the summary as one JSON object" },
  timings: { kind: "switch", help: "add wall-clock timings to the episode file header" },
};

/** Translate flags and positional key=value overrides into config overrides, in order. */
export function overridesFrom(args: ParsedArgs, mode: string, configuredGroups: number): string[] {
  const overrides: string[] = [];
  for (const [flag, spec] of Object.entries(ROLLOUT_FLAGS)) {
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

/**
 * The configured policy, with remote endpoints checked first: a model they do not serve is a
 * usage error (exit 2), endpoints that do not answer a failure (exit 1), each one line (their
 * catalogue codes say which).
 */
export async function readyPolicy(config: RollgymConfig): Promise<Policy> {
  const policy = buildPolicy(config);
  if (policy instanceof ChatPolicy) {
    try {
      const info = await policy.preflight();
      const limit =
        info.contextLength === null
          ? "unknown context length: prompts are sent whole"
          : `context ${info.contextLength} tokens${config.rollgym.llm.count_tokens === "usage" ? ", prompts fitted without count requests (count_tokens=usage)" : ""}`;
      say(`${info.dialect} engine at ${config.rollgym.llm.base_url?.join(", ")}, ${limit}`);
      for (const warning of info.warnings) say(`warning: ${warning}`);
    } catch (error) {
      await policy.close();
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
      countTokens: llm.count_tokens,
      requestSeeds: llm.request_seeds,
      cacheSalt: llm.cache_salt,
      pauseClearCache: llm.pause_clear_cache,
    });
  }
  const options = { noise: policy.noise, malformed: policy.malformed };
  return policy.name === "random" ? randomPolicy(options) : oraclePolicy(options);
}

export async function rolloutCommand(argv: readonly string[]): Promise<number> {
  const args = parseArgs("rollout", argv, ROLLOUT_FLAGS);
  for (const p of args.positionals) {
    if (!isOverride(p))
      throw new UsageError(
        `rollout: unexpected argument ${JSON.stringify(p)} (overrides look like key=value or ~key)`,
      );
  }
  // The mode decides which es_manager section --tag and friends address.
  const early = loadConfig({ files: args.lists.get("config") ?? [], overrides: args.positionals });
  const mode = args.values.get("mode") ?? early.config.rollgym.mode;
  const { loaded, registry } = await setup(
    args,
    overridesFrom(args, mode, early.config.es_manager[mode === "val" ? "val" : "train"].env_groups),
  );
  checkPolicyKeys(loaded);
  const request = checkedRequest(loaded, registry);
  const out = args.values.get("out");
  if (out !== undefined) checkWritable("--out", out, args.switches.has("force"));

  const stop = interruptible();
  try {
    return await play(args, loaded, registry, request, stop);
  } finally {
    stop.release();
  }
}

async function play(
  args: ParsedArgs,
  loaded: LoadedConfig,
  registry: EnvRegistry,
  request: BatchRequest,
  stop: Interruptible,
): Promise<number> {
  const { config } = loaded;
  const out = args.values.get("out");
  const policy = await readyPolicy(config);
  const refusal = policyRefusal(registry, request, policy);
  if (refusal) {
    await policy.close?.();
    throw new UsageError(`--policy ${policy.name}: ${refusal}`);
  }
  reportLoaded(loaded);
  const filterWarning = filterNote(
    request.filter,
    "--value (actor_rollout_ref.rollout.rollout_filter_value)",
  );
  if (filterWarning) say(filterWarning);
  if (config.rollgym.max_obs_length !== null) {
    // Counting observation tokens needs the model's tokenizer, which rollouts over chat do not have.
    say(
      `rollgym.max_obs_length=${config.rollgym.max_obs_length} has no effect: observations are never cut (RAGEN's renders are far below old RAGEN's limits)`,
    );
  }
  let logprobs: ReturnType<typeof logprobsSource> | null = null;
  if (request.tokens && policy instanceof ChatPolicy) {
    logprobs = logprobsSource(policy.engineDialect);
    const warning = logprobsWarning(policy.engineDialect, request.sampling);
    if (warning) say(warning);
  }
  let file: EpisodeFileWriter | null = null;
  if (out !== undefined) {
    try {
      file = await EpisodeFileWriter.open(out, { replace: args.switches.has("force") });
    } catch (error) {
      await policy.close?.();
      throw new UsageError(`--out: cannot write ${JSON.stringify(out)}: ${systemReason(error)}`);
    }
  }

  const total = request.tags.reduce((n, t) => n + t.groups, 0) * request.groupSize;
  const bar = new ProgressBar(`${request.mode} ${request.tags.map((t) => t.tag).join("+")}`, total);
  bar.watch(() => describeEngineStatus(policy.engineStatus?.()));
  const started = Date.now();
  let turns = 0;
  let batch: BatchResult;
  stop.started();
  try {
    batch = await runBatch(registry, request, policy, {
      onTurn: () => turns++,
      // Episodes cancelled by a signal did not finish: the bar counts only those that did.
      onEpisode: (record) => {
        if (record.failure !== "cancelled") bar.tick(record.failure !== null);
      },
      signal: stop.signal,
    });
  } finally {
    bar.done();
  }
  const seconds = (Date.now() - started) / 1000;
  const interrupted = stop.signalName();
  if (interrupted) batch = finishedPart(batch);

  let writeError: string | null = null;
  if (file) {
    const timings = args.switches.has("timings")
      ? { started: new Date(started).toISOString(), seconds }
      : undefined;
    try {
      await file.write(
        {
          mode: request.mode,
          seed: request.seed,
          group_size: request.groupSize,
          tags: [...request.tags],
          policy: policy.name,
          ...(logprobs ? { logprobs } : {}),
          settings: {
            episode: request.episode,
            sampling: request.sampling,
            filter: request.filter,
            normalization: request.normalization,
          },
          ...(timings ? { timings } : {}),
        },
        batch,
        interrupted ? { interrupted } : {},
      );
    } catch (error) {
      writeError = systemReason(error);
    }
  }
  const failures = batch.episodes.filter((e) => e.failure !== null);
  for (const e of failures.slice(0, 5))
    say(`episode ${e.env_id} (${e.tag}, seed ${e.seed}) failed: ${e.failure}`);
  if (failures.length > 5) say(`… and ${failures.length - 5} more failed episodes`);

  const written = file && writeError === null ? `, episodes written to ${out}` : "";
  const writer = new LineWriter();
  if (args.switches.has("json")) {
    await writer.line({
      metrics: batch.metrics,
      episodes: batch.episodes.length,
      failed: batch.failed,
      ...(interrupted ? { interrupted } : {}),
      ...runFigures(seconds, batch.episodes.length, turns, policy),
    });
  } else {
    const keys = Object.keys(batch.metrics);
    const width = Math.max(...keys.map((k) => k.length));
    const rows = keys.map((k) => `${k.padEnd(width)}  ${formatMetric(batch.metrics[k])}`);
    io().stdout.write(
      `${rows.join("\n")}\n\n${batch.episodes.length}${interrupted ? ` of ${total}` : ""} episodes, ` +
        `${batch.failed} failed, ${batch.groups.filter((g) => g.kept).length}/${batch.groups.length} groups kept, ` +
        `seed ${request.seed}${written}${interrupted ? ` (interrupted by ${interrupted})` : ""}\n`,
    );
  }
  await writer.flush();
  await policy.close?.();
  if (writeError !== null) {
    throw new CommandFailure(
      `--out: could not write the episode file ${JSON.stringify(out)}: ${writeError}; the metrics above are what is left of the run`,
    );
  }
  if (interrupted) {
    say(
      `interrupted by ${interrupted}: ${batch.episodes.length} of ${total} episodes had finished${written}`,
    );
    return 128 + os.signals[interrupted];
  }
  // Filtering does not count: a group the filter dropped still played.
  if (batch.groups.length > 0 && batch.groups.every((g) => g.failed)) {
    const first = batch.episodes.find((e) => e.failure !== null)?.failure ?? "unknown";
    throw new CommandFailure(`every group failed (first failure: ${first})`);
  }
  return 0;
}

/**
 * Wall time and rates of a rollout, and what the policy counted: model turns always; HTTP
 * requests (retries included), retries and failed attempts when an engine answered them.
 */
function runFigures(
  seconds: number,
  episodes: number,
  turns: number,
  policy: Policy,
): Record<string, unknown> {
  const rate = (n: number) => (seconds > 0 ? Math.round((n / seconds) * 100) / 100 : null);
  const stats = policy instanceof ChatPolicy ? policy.stats : null;
  return {
    timing: { seconds, episodes_per_s: rate(episodes), turns_per_s: rate(turns) },
    turns,
    ...(stats
      ? { requests: { sent: stats.requests, retries: stats.retries, failures: stats.failures } }
      : {}),
  };
}

/** A model without an endpoint, or a built-in policy next to one, is a mistake worth saying. */
export function checkPolicyKeys(loaded: LoadedConfig): void {
  const { llm } = loaded.config.rollgym;
  const at = (key: string) => {
    const origin = originOf(loaded.origins, key);
    return origin === undefined ? "" : ` (set in ${origin})`;
  };
  if (llm.base_url === null && llm.model !== null) {
    throw new UsageError(
      `--model (rollgym.llm.model) is ${JSON.stringify(llm.model)}${at("rollgym.llm.model")} but no --llm ` +
        "(rollgym.llm.base_url) is given; allowed: a model only together with an endpoint, --llm URL --model M " +
        "(the built-in --policy oracle|random takes no model)",
    );
  }
  if (llm.base_url !== null && "rollgym.policy.name" in loaded.origins) {
    throw new UsageError(
      `--policy (rollgym.policy.name)${at("rollgym.policy.name")} and --llm (rollgym.llm.base_url)${at("rollgym.llm.base_url")} ` +
        "are both given; allowed: one of them, a built-in policy or an endpoint",
    );
  }
  const problem = extraBodyProblem(llm.extra_body ?? {});
  if (problem) throw new UsageError(`${problem.key}${at(problem.key)}: ${problem.reason}`);
  if (llm.count_tokens === "usage") {
    const config = loaded.config.rollgym;
    if (config.tokens)
      throw new UsageError(`--tokens (rollgym.tokens)${at("rollgym.tokens")}: ${TOKENS_NEED_ENGINE_ROUTES}`);
    if (config.context.truncation === "ragen")
      throw new UsageError(
        `rollgym.context.truncation=ragen${at("rollgym.context.truncation")} counts every prompt exactly, which ` +
          `rollgym.llm.count_tokens=usage${at("rollgym.llm.count_tokens")} cannot; allowed: truncation=turns, or count_tokens=engine`,
      );
  }
}

/** The batch the config asks for, checked as the server checks a rollout request. */
export function checkedRequest(loaded: LoadedConfig, registry: EnvRegistry): BatchRequest {
  const { config, origins } = loaded;
  let request: BatchRequest;
  try {
    request = resolveRequest(config);
    for (const { tag } of request.tags) registry.tag(tag);
    validateBatchRequest(request);
    if (request.tokens && !config.rollgym.llm.base_url)
      throw new RangeError("--tokens (rollgym.tokens) needs a remote engine: give --llm URL --model M");
  } catch (error) {
    throw new UsageError(error instanceof Error ? error.message : String(error));
  }
  const { limits } = config.rollgym;
  try {
    checkRolloutShape(request, {
      maxGroupsPerRollout: limits.max_groups_per_rollout,
      maxEpisodesInFlight: limits.max_episodes_in_flight,
    });
  } catch (error) {
    if (!isShapeRefusal(error)) throw error;
    const mode = request.mode;
    const groups = request.tags.reduce((n, t) => n + t.groups, 0);
    const [field, key] =
      error.field === "seed"
        ? seedField(config, mode, groups)
        : error.field === "tags"
          ? [`--groups (es_manager.${mode}.env_groups=${groups})`, `es_manager.${mode}.env_groups`]
          : [
              `--groups × --group-size (es_manager.${mode}.env_groups × group_size = ${groups} × ${request.groupSize})`,
              `es_manager.${mode}.group_size`,
            ];
    const origin = originOf(origins, key);
    const limitKey =
      error.field === "tags"
        ? " (rollgym.limits.max_groups_per_rollout)"
        : error.field === "group_size"
          ? " (rollgym.limits.max_episodes_in_flight)"
          : "";
    throw new UsageError(
      `${field}: ${error.message.replace(/^(max_\w+)/, `$1${limitKey}`)}${origin ? ` (set in ${origin})` : ""}`,
    );
  }
  return request;
}

/** Which keys made the batch seed, for a seed-range error. */
function seedField(config: RollgymConfig, mode: string, groups: number): [string, string] {
  if (config.rollgym.seed !== null) return [`--seed (rollgym.seed=${config.rollgym.seed})`, "rollgym.seed"];
  if (mode === "val") return [`seed.val=${config.seed.val}`, "seed.val"];
  if (config.rollgym.step > 0) {
    return [
      `--step (rollgym.step=${config.rollgym.step}; seed = seed.train ${config.seed.train} + step × ${groups} groups)`,
      "rollgym.step",
    ];
  }
  return [`seed.train=${config.seed.train}`, "seed.train"];
}

/** Fails now, before any work, when `path` cannot be created or written. */
function checkWritable(flag: string, path: string, replace: boolean): void {
  const existing = statSync(path, { throwIfNoEntry: false });
  // A re-run from shell history must not wipe the last run's episodes (hours of engine time).
  if (!replace && existing?.isFile() && existing.size > 0) {
    throw new UsageError(
      `${flag}: ${JSON.stringify(path)} already exists (${existing.size} bytes); allowed: a new path, or --force to replace it`,
    );
  }
  let problem: string | null;
  try {
    problem = writeProblem(path);
  } catch (error) {
    problem = systemReason(error);
  }
  if (problem !== null) {
    throw new UsageError(
      `${flag}: cannot write ${JSON.stringify(path)}: ${problem}; allowed: a file in an existing, writable directory`,
    );
  }
}

/** Why `path` cannot be written (null: it can); access errors are thrown. */
function writeProblem(path: string): string | null {
  const target = statSync(path, { throwIfNoEntry: false });
  if (target?.isDirectory()) return "it is a directory";
  if (target) {
    accessSync(path, constants.W_OK);
    return null;
  }
  const dir = dirname(resolve(path));
  const parent = statSync(dir, { throwIfNoEntry: false });
  if (!parent) return `no such directory ${dir}`;
  if (!parent.isDirectory()) return `${dir} is not a directory`;
  accessSync(dir, constants.W_OK);
  return null;
}

function systemReason(error: unknown): string {
  const code = (error as NodeJS.ErrnoException).code;
  const message = error instanceof Error ? error.message : String(error);
  return code && !message.startsWith(code) ? `${code}: ${message}` : message;
}

interface Interruptible {
  signal: AbortSignal;
  signalName(): NodeJS.Signals | null;
  /** The batch has started: from now on a first signal stops it gracefully. */
  started(): void;
  /** The command is done: uninstall the handlers, unless a signal came (the process is ending). */
  release(): void;
}

/**
 * SIGINT/SIGTERM: before the batch starts there is nothing to keep, so rollgym exits; during
 * it the first stops it (running episodes are cancelled, finished ones kept), the second exits
 * at once.
 */
function interruptible(): Interruptible {
  const controller = new AbortController();
  let received: NodeJS.Signals | null = null;
  let running = false;
  const onSignal = (signal: NodeJS.Signals): void => {
    if (received || !running) {
      say(`${signal}${received ? " again" : ""}: stopping at once, nothing more is written`);
      process.exit(128 + os.signals[signal]);
    }
    received = signal;
    say(`${signal}: stopping; finished episodes are kept (${signal} again stops at once)`);
    controller.abort();
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  return {
    signal: controller.signal,
    signalName: () => received,
    started: () => {
      running = true;
    },
    release: () => {
      // Once interrupted, a second signal still stops at once, also while the end is written:
      // without a handler it would kill the process with the signal instead.
      if (received) return;
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
    },
  };
}

/** After an interruption: the episodes that finished, the groups they complete, their metrics. */
function finishedPart(batch: BatchResult): BatchResult {
  const episodes = batch.episodes.filter((e) => e.failure !== "cancelled");
  const kept = new Set(episodes.map((e) => e.env_id));
  const groups = batch.groups.filter((g) => g.env_ids.every((id) => kept.has(id)));
  const failed = episodes.filter((e) => e.failure !== null).length;
  const metrics = {
    ...batch.metrics,
    "rollgym/failed_episodes": failed,
    "rollgym/cancelled_episodes": batch.episodes.length - episodes.length,
  };
  return { ...batch, episodes, groups, failed, metrics };
}

function formatMetric(value: number): string {
  return Number.isInteger(value) ? String(value) : value.toFixed(4);
}
