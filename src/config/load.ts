// Loads rollgym's config from RAGEN-style YAML files and Hydra-style `key=value` overrides.
//
// Sources merge like OmegaConf: mappings merge key by key, anything else (scalars, lists,
// null) replaces; later files win over earlier ones and overrides win over files. Every
// merged leaf is then classified:
//   - a rollgym key (schema.ts): validated and applied;
//   - a trainer-only key of RAGEN/verl, current or old era: accepted, listed in `ignored`;
//   - a vLLM engine setting (gpu_memory_utilization, …) or eval output path: accepted with a
//     notice; it cannot change the rollouts, and RAGEN's own task configs set some;
//   - a rollout-side RAGEN key rollgym cannot honour: ConfigError, unless it holds RAGEN's
//     own default (so a pasted base.yaml loads), which changes nothing;
//   - an old-era `training.*` key: translated (table below), with a notice;
//   - RAGEN V1's rollout_filter_type std|std_rev: translated to top_k + largest|smallest;
//   - anything else: ConfigError "unknown config key", with the nearest known key.
//
// Old-era keys (ZihanWang314/RAGEN and ZihanWang314/ragen, Jan–Mar 2025: config/base.yaml
// `training:`, turned into verl flags by ragen/train.py; meanings read from the verl fork's
// ray_trainer.py and ragen/llm_agent/generation.py):
//
// | old key                      | old meaning                                              | rollgym key                              |
// |------------------------------|----------------------------------------------------------|------------------------------------------|
// | training.train_batch_size    | env seeds (prompts) per step (data.train_batch_size)     | es_manager.train.env_groups (+ n_groups  |
// |                              |                                                          | = [value] when there is one tag)         |
// | training.n_rollout           | copies of each seed (rollout.n_agent); GRPO grouped by   | es_manager.train.group_size              |
// |                              | seed                                                     |                                          |
// | training.max_turns           | turns in the LLM loop (generation.py run_llm_loop)       | agent_proxy.max_turn                     |
// | training.temperature         | train sampling temperature (rollout.temperature)         | actor_rollout_ref.rollout.temperature    |
// | training.no_think_rl         | keep only <answer>…</answer> (algorithm.no_think_rl)     | agent_proxy.enable_think = !value        |
// | training.max_response_length | new tokens per turn (data.max_response_length)           | actor_rollout_ref.rollout.response_length|
// | training.max_obs_length      | observation tokens kept per turn (cut at the end)        | rollgym.max_obs_length                   |
// | training.val_data_num        | val seeds, a fixed sample of the test set, run in        | es_manager.val.env_groups =              |
// | training.val_batch_size      | batches of val_batch_size, last partial batch dropped    | floor(val_data_num/val_batch_size)       |
// |                              | (old defaults 50 and 10; null = the whole 500-row set)   | × val_batch_size                         |
// | training.binary_reward       | declared and used in experiment docs, but no code ever   | rollgym.binary_reward                    |
// |                              | read it (old runs got the normal reward)                 |                                          |
// Old training.* keys that only shaped the trainer are listed in `ignored`; max_start_length,
// state_masking and train_data_num changed old prompts or seeds and are unsupported.
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import {
  type Document,
  isAlias,
  isMap,
  isScalar,
  LineCounter,
  parseDocument,
  parse as parseYaml,
} from "yaml";
import { isPlainObject } from "../../protocol/plain-object.ts";
import {
  CONTEXT_WINDOW_MODES,
  ConfigError,
  CUSTOM_ENV_SPECS,
  checkField,
  defaultConfig,
  describeAllowed,
  FIELD_SPECS,
  type FieldSpec,
  formatValue,
  holdsMapping,
  OLD_VAL_KEYS as OLD_VAL_SCHEMAS,
  type RollgymConfig,
  validateConfig,
} from "./schema.ts";

export { ConfigError } from "./schema.ts";

export interface LoadConfigInput {
  /** YAML files, applied in order (later wins). */
  files?: readonly string[];
  /** Hydra-style `key=value` (also `+key=value`, `++key=value`, `~key`), applied after the files. */
  overrides?: readonly string[];
}

export interface LoadedConfig {
  config: RollgymConfig;
  /** Trainer-only keys seen (dotted, each once, in order of appearance); they have no effect. */
  ignored: string[];
  /** What was translated, defaulted or skipped, in words. */
  notices: string[];
  /** Where each key set by a source was set: "file:line" or `override "key=value"` (see originOf). */
  origins: Record<string, string>;
  /**
   * The directory of the file each key was set in (absolute), for keys set by a file: relative
   * paths in a file's values start there. Keys set by key=value are absent (their paths start
   * in the current directory).
   */
  dirs: Record<string, string>;
}

/**
 * Where `key` was set: the key itself, else its nearest set parent (a mapping given whole), else
 * the first set key below it. Undefined when no source touched it (a default).
 */
export function originOf(origins: Readonly<Record<string, string>>, key: string): string | undefined {
  for (let k = key; k !== ""; k = k.includes(".") ? k.slice(0, k.lastIndexOf(".")) : "") {
    if (k in origins) return origins[k];
  }
  const below = Object.keys(origins).find((k) => k.startsWith(`${key}.`));
  return below === undefined ? undefined : origins[below];
}

interface Source {
  label: string;
  file?: string;
  doc?: Document;
  lines?: LineCounter;
}

interface Leaf {
  path: string[];
  value: unknown;
  source: number;
  /** The old-era key this leaf was translated from, for error messages. */
  alias?: string;
}

const SEP = "\u0000"; // path separator that cannot occur in a key
const idOf = (path: readonly string[]): string => path.join(SEP);
const dotted = (path: readonly string[]): string => path.join(".");

function deepEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a) && Array.isArray(b))
    return a.length === b.length && a.every((x, i) => deepEqual(x, b[i]));
  if (isPlainObject(a) && isPlainObject(b)) {
    const keys = Object.keys(a);
    return keys.length === Object.keys(b).length && keys.every((k) => deepEqual(a[k], b[k]));
  }
  return false;
}

/** Merged leaves, OmegaConf merge semantics. */
class LeafStore {
  readonly leaves = new Map<string, Leaf>();

  get(path: readonly string[]): Leaf | undefined {
    return this.leaves.get(idOf(path));
  }

  hasBelow(path: readonly string[]): boolean {
    return this.firstBelow(path) !== undefined;
  }

  firstBelow(path: readonly string[]): Leaf | undefined {
    const prefix = idOf(path) + SEP;
    for (const [id, leaf] of this.leaves) if (id.startsWith(prefix)) return leaf;
    return undefined;
  }

  delete(path: readonly string[]): void {
    const id = idOf(path);
    for (const key of [...this.leaves.keys()])
      if (key === id || key.startsWith(id + SEP)) this.leaves.delete(key);
  }

  set(path: readonly string[], value: unknown, source: number, alias?: string): void {
    for (let i = 1; i < path.length; i++) this.leaves.delete(idOf(path.slice(0, i)));
    const id = idOf(path);
    for (const key of [...this.leaves.keys()]) if (key.startsWith(id + SEP)) this.leaves.delete(key);
    this.leaves.set(id, { path: [...path], value, source, ...(alias ? { alias } : {}) });
  }

  merge(path: readonly string[], value: unknown, source: number): void {
    if (!isPlainObject(value)) {
      this.set(path, value, source);
      return;
    }
    const entries = Object.entries(value);
    // Merging {} into an existing mapping keeps it; elsewhere it is an empty mapping.
    if (entries.length === 0) {
      if (!this.hasBelow(path)) this.set(path, {}, source);
      return;
    }
    for (let i = 1; i <= path.length; i++) this.leaves.delete(idOf(path.slice(0, i)));
    for (const [key, child] of entries) this.merge([...path, key], child, source);
  }
}

// ---------------------------------------------------------------------------------------------
// Key classes

/** Trainer-side keys of RAGEN and verl (current and old era): accepted, reported as ignored. */
const TRAINER_ONLY: readonly string[] = [
  // current RAGEN (config/base.yaml) and verl ppo_trainer.yaml groups
  "system",
  "use_critic",
  "trainer",
  "critic",
  "algorithm",
  "data",
  "lora",
  "collapse_detection",
  "reward_model",
  "custom_reward_function",
  "ray_init",
  "ray_kwargs",
  "global_profiler",
  "model_path",
  "ppo_mini_batch_size",
  "micro_batch_size_per_gpu",
  "log_prob_micro_batch_size_per_gpu",
  "enable_response_mask",
  "grpo_advantage_length_weight",
  "actor_rollout_ref.actor",
  "actor_rollout_ref.ref",
  "actor_rollout_ref.model",
  "actor_rollout_ref.hybrid_engine",
  "actor_rollout_ref.rollout.log_prob_micro_batch_size",
  "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
  "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz",
  "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
  // early stopping of the training loop
  "actor_rollout_ref.rollout.rollout_filter_empty_stop_steps",
  // "useless. Just put it here" (base.yaml)
  "actor_rollout_ref.rollout.prompt_length",
  // only reaches the trainer's advantage step; the group size is es_manager.<mode>.group_size
  "actor_rollout_ref.rollout.n",
  // old era (ZihanWang314/RAGEN config/base.yaml)
  "model",
  "optimization",
  "logging",
  "rl_or_sft",
  "sft",
  "training.micro_batch_size",
  "training.ppo_batch_size",
  "training.total_epochs",
  "training.use_kl_loss",
  "training.ref_update_steps",
  "training.total_training_steps",
  "training.use_sft",
  // declared in old base.yaml, never read by any code
  "training.mask_state",
  "training.length_penalty",
];

/**
 * vLLM engine settings (RAGEN's in-process engine; verl's and RAGEN's configs). They cannot change
 * which rollouts are produced, and rollgym talks to an OpenAI-compatible server that owns them,
 * so any value is accepted and listed in a notice. RAGEN's own task configs set some of them
 * (_6_webshop.yaml, _9_search.yaml: max_num_batched_tokens; eval.yaml: gpu_memory_utilization 0.9).
 */
const ENGINE_ONLY: readonly string[] = [
  "name",
  "load_format",
  "tensor_model_parallel_size",
  "gpu_memory_utilization",
  "max_num_batched_tokens",
  "enforce_eager",
  "free_cache_engine",
  "dtype",
  "max_num_seqs",
  "enable_chunked_prefill",
  "enable_prefix_caching",
  "disable_log_stats",
  "log_stats_interval",
  "mode",
  "tp_size_check",
  "engine_kwargs",
  // only feeds RAGEN's entropy metrics; rollgym does not request log-probs
  "val_kwargs.logprobs",
]
  .map((key) => `actor_rollout_ref.rollout.${key}`)
  .concat(["training.rollout_tp_size"]);

interface Unsupported {
  key: string;
  why: string;
  /** Leaf values equal to RAGEN's own defaults (base.yaml@20daedc, else verl's), accepted as no-ops. */
  defaults?: Readonly<Record<string, unknown>>;
}

const R = "actor_rollout_ref.rollout.";
/** An OmegaConf interpolation string, `${key}`. */
const ref = (key: string): string => "$" + "{" + key + "}";

/** Rollout-side RAGEN keys rollgym does not support (a key may be a prefix). */
const UNSUPPORTED: readonly Unsupported[] = [
  {
    key: `${R}ignore_eos`,
    why: "it makes generation run past EOS to response_length, and rollgym always stops at EOS",
    defaults: { [`${R}ignore_eos`]: false },
  },
  {
    key: `${R}do_sample`,
    why:
      "it is verl's switch, which RAGEN reads only as a fallback for val_kwargs.do_sample; set " +
      "actor_rollout_ref.rollout.val_kwargs.do_sample instead",
    defaults: { [`${R}do_sample`]: true },
  },
  {
    key: `${R}use_fire_sampling`,
    why: "FIRE sampling is not implemented",
    defaults: { [`${R}use_fire_sampling`]: false },
  },
  {
    key: `${R}chat_scheduler`,
    why: "it belongs to verl's own async multi-turn rollout, which RAGEN replaces with agent_proxy",
    defaults: { [`${R}chat_scheduler`]: null },
  },
  {
    key: `${R}multi_turn`,
    why: "it is verl's own multi-turn rollout; RAGEN's (and rollgym's) multi-turn settings are agent_proxy.*",
    defaults: {
      [`${R}multi_turn.enable`]: false,
      [`${R}multi_turn.max_turns`]: null,
      [`${R}multi_turn.tool_config_path`]: null,
      [`${R}multi_turn.format`]: "chatml",
    },
  },
  {
    key: `${R}val_kwargs.n`,
    why: "RAGEN samples one response per env; repeat prompts with es_manager.val.group_size",
    defaults: { [`${R}val_kwargs.n`]: 1 },
  },
  {
    key: "agent_proxy.batch_adjust_mode",
    why:
      "it pads or trims the filtered batch to the trainer's mini-batch multiple (RAGEN's adjust_batch); " +
      "rollgym hands over whole groups and leaves batch shaping to the trainer",
    defaults: { "agent_proxy.batch_adjust_mode": "copy" },
  },
  {
    key: "ctx_manager",
    why:
      "RAGEN declares ctx_manager.generation.gen_config but never reads it; sampling comes from " +
      "actor_rollout_ref.rollout.* (set those instead)",
    defaults: {
      "ctx_manager.generation.gen_config.response_length": ref("actor_rollout_ref.rollout.response_length"),
      "ctx_manager.generation.gen_config.temperature": ref("actor_rollout_ref.rollout.temperature"),
      "ctx_manager.generation.gen_config.top_p": ref("actor_rollout_ref.rollout.top_p"),
      "ctx_manager.generation.gen_config.top_k": ref("actor_rollout_ref.rollout.top_k"),
      "ctx_manager.generation.gen_config.kwargs": null,
    },
  },
  {
    key: "model_config",
    why: "it selects RAGEN's API model for evaluation; use rollgym.llm.{base_url, model, api_key, concurrency}",
  },
  {
    key: "model_info",
    why: "it describes RAGEN's API models for evaluation; use rollgym.llm.{base_url, model, api_key}",
  },
  {
    key: "env",
    why:
      "it is old RAGEN's (early 2025) env selection; choose envs with es_manager.<mode>.env_configs.tags " +
      "and set their options in custom_envs.<Tag>.env_config",
  },
  {
    key: "training.max_start_length",
    why:
      "old RAGEN cut the first prompt to this many tokens; rollgym keeps the prompt whole and drops old " +
      "turns beyond actor_rollout_ref.rollout.max_model_len",
    defaults: { "training.max_start_length": 400 },
  },
  {
    key: "training.state_masking",
    why: "it wrapped observations in <start-state>…<end-state> markers; rollgym renders RAGEN's current prompt",
    defaults: { "training.state_masking": false },
  },
  {
    key: "training.train_data_num",
    why:
      "old RAGEN drew train seeds from a fixed sample of N dataset rows; rollgym follows RAGEN's current seed " +
      "schedule (seed.train + step × env_groups)",
    defaults: { "training.train_data_num": null },
  },
];

const UNSUPPORTED_METRICS: Readonly<Record<string, string>> = {
  entropy: "it needs the policy's token log-probs, which rollgym does not compute",
  entropy_variance: "it needs the policy's token log-probs, which rollgym does not compute",
  entropy_std: "it needs the policy's token log-probs, which rollgym does not compute",
  length: "it needs the trainer's response-mask token counts; rollgym's filter scores rewards only",
};

/** Old-era (training.*) keys translated one to one. */
const OLD_KEYS: Readonly<Record<string, { to: string; meaning: string; invert?: boolean }>> = {
  "training.train_batch_size": {
    to: "es_manager.train.env_groups",
    meaning: "env seeds (prompts) per step, each rolled out n_rollout times",
  },
  "training.n_rollout": {
    to: "es_manager.train.group_size",
    meaning: "rollouts per seed (verl rollout.n_agent), grouped by seed",
  },
  "training.max_turns": { to: "agent_proxy.max_turn", meaning: "turns in the LLM loop" },
  "training.temperature": {
    to: "actor_rollout_ref.rollout.temperature",
    meaning: "train sampling temperature (validation was greedy)",
  },
  "training.no_think_rl": {
    to: "agent_proxy.enable_think",
    meaning: "answers reduced to <answer>…</answer>, i.e. no thinking",
    invert: true,
  },
  "training.max_response_length": {
    to: "actor_rollout_ref.rollout.response_length",
    meaning: "new tokens per turn",
  },
  "training.max_obs_length": {
    to: "rollgym.max_obs_length",
    meaning: "observation tokens kept per turn (the rest cut off)",
  },
  "training.binary_reward": {
    to: "rollgym.binary_reward",
    meaning:
      "a 0/1 success reward; note old RAGEN declared it but no code read it, so its runs used the normal reward",
  },
};

const OLD_VAL_KEYS = Object.keys(OLD_VAL_SCHEMAS) as (keyof typeof OLD_VAL_SCHEMAS)[];
// old base.yaml; create_data.sh --test_size
const OLD_VAL_DEFAULTS = {
  data: OLD_VAL_SCHEMAS["training.val_data_num"].default as number,
  batch: OLD_VAL_SCHEMAS["training.val_batch_size"].default,
  testSetSize: 500,
};

/** Hydra machinery a pasted RAGEN file may carry at top level. */
const MACHINERY: Readonly<Record<string, string>> = {
  defaults:
    "Hydra's defaults list; rollgym starts from RAGEN's base.yaml values and its own env registry (envs.yaml)",
  hydra: "Hydra's own settings",
};

const startsWithKey = (key: string, prefix: string): boolean =>
  key === prefix || key.startsWith(`${prefix}.`);

/** A rollgym leaf: a schema key or a field of a custom_envs entry. */
function isField(path: readonly string[]): boolean {
  if (dotted(path) in FIELD_SPECS) return true;
  // Inside a free-form mapping (rollgym.llm.extra_body.chat_template_kwargs.enable_thinking=false).
  for (let i = path.length - 1; i > 0; i--) if (DATA_FIELDS.has(dotted(path.slice(0, i)))) return true;
  return path[0] === "custom_envs" && path.length === 3 && path[2] in CUSTOM_ENV_SPECS;
}

/** Schema keys that hold a free-form mapping, merged key by key like the rest. */
const DATA_FIELDS: ReadonlySet<string> = new Set(
  Object.entries(FIELD_SPECS)
    .filter(([, spec]) => holdsMapping(spec))
    .map(([key]) => key),
);

/** Mapping positions of the schema: a leaf there must be an empty mapping. */
const GROUPS: ReadonlySet<string> = new Set(
  Object.keys(FIELD_SPECS).flatMap((key) => {
    const parts = key.split(".");
    return parts.slice(0, -1).map((_, i) => parts.slice(0, i + 1).join("."));
  }),
);

// ---------------------------------------------------------------------------------------------
// Suggestions

function editDistance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let diagonal = row[0];
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const above = row[j];
      row[j] = Math.min(row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] === b[j - 1] ? 0 : 1));
      diagonal = above;
    }
  }
  return row[b.length];
}

function suggest(path: readonly string[]): string | undefined {
  const key = dotted(path);
  const candidates = [...Object.keys(FIELD_SPECS), ...Object.keys(OLD_KEYS), ...OLD_VAL_KEYS];
  if (path[0] === "custom_envs" && path.length >= 3) {
    candidates.push(...Object.keys(CUSTOM_ENV_SPECS).map((f) => `custom_envs.${path[1]}.${f}`));
  }
  let best: string | undefined;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const candidate of candidates) {
    const distance = editDistance(key, candidate);
    if (distance < bestDistance) [best, bestDistance] = [candidate, distance];
  }
  if (best && bestDistance <= Math.max(2, Math.floor(key.length / 6))) return best;
  // Right name under the wrong group, e.g. agent_proxy.temperature.
  const last = path[path.length - 1];
  const sameName = candidates
    .filter((c) => !c.startsWith("training.") && c.endsWith(`.${last}`))
    .sort((a, b) => a.length - b.length);
  return sameName[0];
}

// ---------------------------------------------------------------------------------------------
// Reading sources

function lineOf(source: Source, path: readonly string[]): number | undefined {
  if (!source.doc || !source.lines) return undefined;
  let node: unknown = source.doc.contents;
  let line: number | undefined;
  for (const part of path) {
    if (isAlias(node)) node = node.resolve(source.doc);
    if (!isMap(node)) break;
    const pair = node.items.find((item) => isScalar(item.key) && String(item.key.value) === part);
    if (!pair || !isScalar(pair.key) || !pair.key.range) break;
    line = source.lines.linePos(pair.key.range[0]).line;
    node = pair.value;
  }
  return line;
}

function readYamlFile(file: string, index: number, sources: Source[]): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new ConfigError(null, `cannot read config file ${file}: ${reason}`, { file });
  }
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, merge: true, prettyErrors: true });
  const error = doc.errors[0];
  if (error) {
    const line = error.linePos?.[0].line;
    const at = line === undefined ? "" : `:${line}:${error.linePos?.[0].col}`;
    // The parser's message quotes the offending lines below its first; the position says enough.
    let reason = error.message.split("\n")[0].replace(/ at line \d+, column \d+:?$/, "");
    // The parser recurses per level of nesting: a file nested thousands deep exhausts its stack.
    if (reason.includes("Maximum call stack size exceeded"))
      reason = "nested too deeply (a config nests a few levels; this exhausts the YAML parser's stack)";
    throw new ConfigError(null, `YAML syntax error in ${file}${at}: ${reason}`, { file, line });
  }
  sources[index] = { label: file, file, doc, lines };
  let data: unknown;
  try {
    data = doc.toJS({ maxAliasCount: 1000 });
  } catch (e) {
    throw new ConfigError(null, `cannot read ${file}: ${e instanceof Error ? e.message : String(e)}`, {
      file,
    });
  }
  if (data === null || data === undefined) return {};
  if (!isPlainObject(data)) {
    throw new ConfigError(
      null,
      `${file}: expected a mapping of config keys at the top level, got ${formatValue(data)}`,
      {
        file,
        line: 1,
      },
    );
  }
  return data;
}

const NULL_WORDS = new Set(["null", "Null", "NULL", "~"]);

/** Hydra-style override value: a YAML scalar or flow collection; unparsable text stays a string. */
function parseOverrideValue(text: string): unknown {
  if (text.trim() === "") return "";
  let value: unknown;
  try {
    value = parseYaml(text);
  } catch {
    return text;
  }
  // YAML turns "#…" into a comment (null); Hydra would keep the text.
  if (value === null && !NULL_WORDS.has(text.trim())) return text;
  if (value === undefined) return text;
  return value;
}

const OVERRIDE_KEY = /^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/;

interface Override {
  path: string[];
  value?: unknown;
  remove: boolean;
  label: string;
}

function parseOverride(text: string): Override {
  const eq = text.indexOf("=");
  let key = eq < 0 ? text : text.slice(0, eq);
  const remove = key.startsWith("~");
  key = key.replace(/^(~|\+\+|\+)/, "");
  const shown = /(^|\.)api_key$/.test(key) && eq >= 0 ? `${text.slice(0, eq)}=***` : text;
  const label = `override "${shown}"`;
  if (!OVERRIDE_KEY.test(key) || (eq < 0 && !remove)) {
    throw new ConfigError(
      key || null,
      `bad ${label}: expected key=value (also +key=value, ++key=value, ~key) with a dotted key`,
    );
  }
  const path = key.split(".");
  if (remove) return { path, remove: true, label };
  return { path, value: parseOverrideValue(text.slice(eq + 1)), remove: false, label };
}

// ---------------------------------------------------------------------------------------------
// Loading

export function loadConfig(input: LoadConfigInput): LoadedConfig {
  const files = input.files ?? [];
  const overrides = input.overrides ?? [];
  const sources: Source[] = [];
  const store = new LeafStore();
  const ignored: string[] = [];
  const notices: string[] = [];

  files.forEach((file, index) => {
    const data = readYamlFile(file, index, sources);
    for (const [key, value] of Object.entries(data)) {
      if (key in MACHINERY) {
        notices.push(`${file}: ignored top-level \`${key}\` (${MACHINERY[key]})`);
        continue;
      }
      store.merge([key], value, index);
    }
  });
  overrides.forEach((text, i) => {
    const index = files.length + i;
    const override = parseOverride(text);
    sources[index] = { label: override.label };
    if (override.path.length === 1 && override.path[0] in MACHINERY) {
      notices.push(`${override.label}: ignored \`${override.path[0]}\` (${MACHINERY[override.path[0]]})`);
    } else if (override.remove) {
      store.delete(override.path);
    } else {
      store.merge(override.path, override.value, index);
    }
  });

  const where = (leaf: Leaf | undefined): { text: string; label?: string; file?: string; line?: number } => {
    if (!leaf) return { text: "" };
    const source = sources[leaf.source];
    // A translated leaf is found in its file under the old key.
    const line = lineOf(source, leaf.alias ? leaf.alias.split(".") : leaf.path);
    const label = line === undefined ? source.label : `${source.label}:${line}`;
    return { text: ` (set in ${label})`, label, file: source.file, line };
  };
  const fail = (leaf: Leaf | undefined, key: string, message: string): never => {
    const at = where(leaf);
    throw new ConfigError(key, message + at.text, { file: at.file, line: at.line });
  };

  translateOldKeys(store, notices, fail);
  translateV1FilterType(store, notices, fail);

  // Classify every merged leaf.
  const config = defaultConfig() as unknown as Record<string, unknown>;
  const applied: Leaf[] = [];
  const noOps: string[] = [];
  const engineKeys: string[] = [];
  const outputKeys: string[] = []; // RAGEN eval.yaml's output.*: where its eval script saves rollouts
  for (const leaf of store.leaves.values()) {
    const key = dotted(leaf.path);
    if (GROUPS.has(key) || key === "custom_envs") {
      if (isPlainObject(leaf.value)) continue; // an empty mapping
      fail(leaf, key, `invalid value for ${key}: ${formatValue(leaf.value)}; allowed: a mapping of keys`);
    }
    if (isField(leaf.path) || (leaf.path[0] === "custom_envs" && isCustomEnvPosition(leaf, fail))) {
      applied.push(leaf);
      continue;
    }
    if (TRAINER_ONLY.some((prefix) => startsWithKey(key, prefix))) {
      if (!ignored.includes(key)) ignored.push(key);
      if (key === `${R}n` && leaf.value !== 1) {
        notices.push(
          `${key}=${formatValue(leaf.value)} ignored: RAGEN passes it only to the trainer's advantage step; ` +
            "the group size is es_manager.<mode>.group_size",
        );
      }
      continue;
    }
    if (ENGINE_ONLY.some((prefix) => startsWithKey(key, prefix))) {
      engineKeys.push(`${key}=${formatValue(leaf.value)}`);
      continue;
    }
    if (startsWithKey(key, "output")) {
      outputKeys.push(`${key}=${formatValue(leaf.value)}`);
      continue;
    }
    const unsupported = UNSUPPORTED.find((u) => startsWithKey(key, u.key));
    if (unsupported) {
      const defaults = unsupported.defaults ?? {};
      if (key in defaults && deepEqual(defaults[key], leaf.value)) {
        noOps.push(`${key}=${formatValue(leaf.value)}`);
        continue;
      }
      const accepted = Object.entries(defaults)
        .filter(([k]) => k === key)
        .map(([, v]) => ` (only RAGEN's default ${formatValue(v)} is accepted, as a no-op)`)
        .join("");
      fail(
        leaf,
        key,
        `${key}=${formatValue(leaf.value)} is a RAGEN key rollgym does not support: ${unsupported.why}${accepted}`,
      );
    }
    // A mapping given to a scalar key (OmegaConf refuses to merge it): the key's value is wrong.
    for (let i = leaf.path.length - 1; i > 0; i--) {
      const field = dotted(leaf.path.slice(0, i));
      const spec = FIELD_SPECS[field];
      if (spec && !holdsMapping(spec)) {
        fail(
          leaf,
          field,
          `invalid value for ${field}: a mapping (${key}=${formatValue(leaf.value)}); allowed: ${describeAllowed(spec)}`,
        );
      }
    }
    const hint = suggest(leaf.path);
    fail(leaf, key, `unknown config key ${key}${hint ? ` (did you mean ${hint}?)` : ""}`);
  }
  if (engineKeys.length > 0) {
    notices.push(
      "vLLM engine settings, no effect in rollgym (configure the server at rollgym.llm.base_url): " +
        engineKeys.join(", "),
    );
  }
  if (outputKeys.length > 0) {
    notices.push(
      `RAGEN eval output settings, no effect (rollgym writes where its command line says): ${outputKeys.join(", ")}`,
    );
  }
  if (noOps.length > 0) {
    notices.push(`accepted at RAGEN's default value, no effect in rollgym: ${noOps.join(", ")}`);
  }

  // Apply rollgym keys (resolving ${…} interpolations) onto the defaults.
  const defaults = defaultConfig();
  for (const leaf of applied) {
    const key = dotted(leaf.path);
    let value = resolveInterpolation(store, defaults, leaf, fail);
    if (key === `${R}rollout_filter_metric` && typeof value === "string") {
      const metric = value.toLowerCase(); // RAGEN lower-cases the metric name
      value = metric;
      if (metric in UNSUPPORTED_METRICS) {
        fail(
          leaf,
          key,
          `${key}=${formatValue(metric)} is a RAGEN value rollgym does not support: ${UNSUPPORTED_METRICS[metric]}; ` +
            `allowed: reward_variance, reward, reward_sum (reward_std = reward_variance)`,
        );
      }
    }
    if (leaf.path[0] === "custom_envs") {
      applyCustomEnv(config, leaf, value);
    } else {
      setIn(config, leaf.path, value);
    }
  }

  const seedVal = store.get(["seed", "val"]);
  if (seedVal && seedVal.value === null) {
    (config.seed as Record<string, unknown>).val = 123;
    notices.push("seed.val is null: using 123, RAGEN's fallback for validation");
  }
  noteDeadFilterRatio(store, notices);
  noteContextWindow(config, notices);

  let validated: RollgymConfig;
  try {
    validated = validateConfig(config as unknown as RollgymConfig);
  } catch (error) {
    if (!(error instanceof ConfigError) || error.key === null) throw error;
    // A mapping-valued key (extra_body, a sampling map) is stored as its entries: the first set one locates it.
    const leaf = store.get(error.key.split(".")) ?? store.firstBelow(error.key.split("."));
    if (error.key.endsWith(".env_configs.n_groups")) {
      // A layout error: say where each of the three related keys came from.
      const mode = error.key.split(".").slice(0, 2);
      const origins = [["env_configs", "n_groups"], ["env_configs", "tags"], ["env_groups"]].flatMap(
        (rest) => {
          const related = store.get([...mode, ...rest]);
          if (!related) return [];
          const name = related.alias ?? dotted(related.path);
          return [`${name}${where(related).text.replace(" (", " ").replace(/\)$/, "")}`];
        },
      );
      const at = where(leaf ?? store.get([...mode, "env_groups"]));
      const origin = origins.length > 0 ? ` (${origins.join("; ")})` : "";
      throw new ConfigError(error.key, error.message + origin, { file: at.file, line: at.line });
    }
    if (leaf?.alias) {
      const message = error.message.replace(`for ${error.key}:`, `for ${leaf.alias} (now ${error.key}):`);
      return fail(leaf, leaf.alias, message);
    }
    return fail(leaf, error.key, error.message);
  }
  // Every set key, and every mapping above one (where it first appears), for later errors.
  const origins: Record<string, string> = {};
  const dirs: Record<string, string> = {};
  for (const leaf of store.leaves.values()) {
    origins[dotted(leaf.path)] = where(leaf).label!;
    const file = sources[leaf.source].file;
    if (file !== undefined) dirs[dotted(leaf.path)] = dirname(resolve(file));
    for (let i = leaf.path.length - 1; i > 0; i--) {
      const key = dotted(leaf.path.slice(0, i));
      if (key in origins) break;
      const source = sources[leaf.source];
      const line = leaf.alias ? undefined : lineOf(source, leaf.path.slice(0, i));
      origins[key] = line === undefined ? source.label : `${source.label}:${line}`;
    }
  }
  return { config: validated, ignored, notices, origins, dirs };
}

type Fail = (leaf: Leaf | undefined, key: string, message: string) => never;

function setIn(root: Record<string, unknown>, path: readonly string[], value: unknown): void {
  let node = root;
  for (const part of path.slice(0, -1)) {
    if (!isPlainObject(node[part])) node[part] = {};
    node = node[part] as Record<string, unknown>;
  }
  node[path[path.length - 1]] = value;
}

/** custom_envs leaves: `custom_envs.<Tag>` ({}), a field, or data below `env_config`. */
function isCustomEnvPosition(leaf: Leaf, fail: Fail): boolean {
  const { path } = leaf;
  const key = dotted(path);
  if (path.length === 2) {
    if (isPlainObject(leaf.value)) return true;
    return fail(
      leaf,
      key,
      `invalid value for ${key}: ${formatValue(leaf.value)}; allowed: a mapping of env keys`,
    );
  }
  if (path.length > 3 && path[2] === "env_config") return true;
  if (path.length >= 3 && !(path[2] in CUSTOM_ENV_SPECS)) {
    const entryKey = dotted(path.slice(0, 3));
    const hint = suggest(path.slice(0, 3));
    return fail(
      leaf,
      entryKey,
      `unknown config key ${entryKey}${hint ? ` (did you mean ${hint}?)` : ""}; ` +
        `a custom_envs entry has ${Object.keys(CUSTOM_ENV_SPECS).join(", ")}`,
    );
  }
  return fail(leaf, key, `invalid value for ${key}: ${formatValue(leaf.value)}; allowed: a mapping of keys`);
}

function applyCustomEnv(config: Record<string, unknown>, leaf: Leaf, value: unknown): void {
  const envs = config.custom_envs as Record<string, Record<string, unknown>>;
  const [, tag, field, ...rest] = leaf.path;
  envs[tag] ??= {};
  if (field === undefined) return;
  if (rest.length === 0) {
    envs[tag][field] = isPlainObject(value) ? structuredClone(value) : value;
    return;
  }
  // Data below env_config, rebuilt from its merged leaves.
  if (!isPlainObject(envs[tag].env_config)) envs[tag].env_config = {};
  setIn(envs[tag].env_config as Record<string, unknown>, rest, structuredClone(value));
}

function lookupDefault(defaults: RollgymConfig, path: readonly string[]): unknown {
  let node: unknown = defaults;
  for (const part of path) node = isPlainObject(node) ? node[part] : undefined;
  return node;
}

/** OmegaConf `${a.b}` interpolation of a whole value (the form RAGEN's configs use). */
function resolveInterpolation(store: LeafStore, defaults: RollgymConfig, leaf: Leaf, fail: Fail): unknown {
  const key = dotted(leaf.path);
  if (leaf.path[0] === "custom_envs" && leaf.path[2] === "env_config") return leaf.value; // plain data
  let value = leaf.value;
  const seen = new Set<string>();
  while (typeof value === "string" && value.includes("${")) {
    const match = /^\$\{([A-Za-z0-9_.-]+)\}$/.exec(value);
    if (!match) {
      const what = /\$\{[^}]*:/.test(value)
        ? `interpolation resolvers (${ref("name:…")})`
        : `text around ${ref("…")}`;
      return fail(
        leaf,
        key,
        `invalid value for ${key}: ${formatValue(value)}; ${what} not supported, only ${ref("dotted.key")}`,
      );
    }
    const target = match[1];
    if (seen.has(target) || seen.size > 16) {
      return fail(leaf, key, `invalid value for ${key}: interpolation loop through \${${target}}`);
    }
    seen.add(target);
    const path = target.split(".");
    const found = store.get(path);
    value = found ? found.value : lookupDefault(defaults, path);
    if (value === undefined || isPlainObject(value)) {
      return fail(leaf, key, `invalid value for ${key}: cannot resolve \${${target}} to a value`);
    }
  }
  return value;
}

/** Old-era training.* keys → current keys, with the later source winning over a current key. */
function translateOldKeys(store: LeafStore, notices: string[], fail: Fail): void {
  const put = (
    from: Leaf,
    oldKey: string,
    toKey: string,
    value: unknown,
    meaning: string,
    shown?: string,
  ): void => {
    const to = toKey.split(".");
    const current = store.get(to);
    store.delete(from.path);
    if (current && current.source > from.source) {
      notices.push(`${oldKey} (old RAGEN) not used: ${toKey} is set later`);
      return;
    }
    if (current && current.source === from.source && !current.alias && !deepEqual(current.value, value)) {
      fail(
        from,
        oldKey,
        `${oldKey}=${formatValue(from.value)} conflicts with ${toKey}=${formatValue(current.value)} in the same source`,
      );
    }
    store.set(to, value, from.source, oldKey);
    const before = shown ?? `${oldKey}=${formatValue(from.value)}`;
    notices.push(`${before} (old RAGEN: ${meaning}) → ${toKey}=${formatValue(value)}`);
  };

  for (const [oldKey, rule] of Object.entries(OLD_KEYS)) {
    const leaf = store.get(oldKey.split("."));
    if (!leaf) continue;
    checkOld(leaf, oldKey, FIELD_SPECS[rule.to], fail);
    put(leaf, oldKey, rule.to, rule.invert ? !leaf.value : leaf.value, rule.meaning);
    if (oldKey === "training.train_batch_size") followNGroups(store, "train", leaf, notices);
  }

  const [dataLeaf, batchLeaf] = OLD_VAL_KEYS.map((k) => store.get(k.split(".")));
  if (dataLeaf || batchLeaf) {
    for (const key of OLD_VAL_KEYS) {
      const leaf = store.get(key.split("."));
      if (leaf) checkOld(leaf, key, OLD_VAL_SCHEMAS[key], fail);
    }
    const data = dataLeaf
      ? ((dataLeaf.value as number | null) ?? OLD_VAL_DEFAULTS.testSetSize)
      : OLD_VAL_DEFAULTS.data;
    const batch = batchLeaf ? (batchLeaf.value as number) : OLD_VAL_DEFAULTS.batch;
    const groups = Math.floor(data / batch) * batch;
    const latest = [dataLeaf, batchLeaf].reduce<Leaf | undefined>(
      (a, b) => (b && (!a || b.source > a.source) ? b : a),
      undefined,
    ) as Leaf;
    const shown = `training.val_data_num=${formatValue(dataLeaf?.value ?? data)}, training.val_batch_size=${batch}`;
    if (groups === 0) {
      fail(
        latest,
        latest.path.join("."),
        `${shown}: fewer val seeds than one batch; old RAGEN's val loader (drop_last) ran no validation at all; ` +
          "allowed: val_data_num >= val_batch_size (or set es_manager.val.env_groups)",
      );
    }
    for (const leaf of [dataLeaf, batchLeaf]) if (leaf && leaf !== latest) store.delete(leaf.path);
    put(
      latest,
      dotted(latest.path),
      "es_manager.val.env_groups",
      groups,
      `validation ran floor(${data}/${batch}) full batches of ${batch} seeds, each repeated n_rollout times and ` +
        "decoded greedily; rollgym runs the seeds as one val rollout with es_manager.val.group_size and val_kwargs " +
        "unchanged; set actor_rollout_ref.rollout.val_kwargs.do_sample=false for greedy decoding",
      shown,
    );
    followNGroups(store, "val", latest, notices);
  }
}

function checkOld(leaf: Leaf, key: string, spec: FieldSpec, fail: Fail): void {
  try {
    checkField(key, spec, leaf.value);
  } catch (error) {
    if (error instanceof ConfigError) fail(leaf, key, error.message);
    throw error;
  }
}

/** With one tag, n_groups follows an old-era group count, unless set by this or a later source. */
function followNGroups(store: LeafStore, mode: "train" | "val", from: Leaf, notices: string[]): void {
  const prefix = ["es_manager", mode, "env_configs"];
  const nGroups = store.get([...prefix, "n_groups"]);
  if (nGroups && nGroups.source >= from.source) return;
  const tags = store.get([...prefix, "tags"])?.value ?? defaultConfig().es_manager[mode].env_configs.tags;
  const groups = store.get(["es_manager", mode, "env_groups"])?.value;
  if (!Array.isArray(tags) || tags.length !== 1) return;
  store.set([...prefix, "n_groups"], [groups], from.source);
  notices.push(`es_manager.${mode}.env_configs.n_groups=[${formatValue(groups)}] follows (one tag)`);
}

/** RAGEN V1 (RAGEN-AI, 2025): rollout_filter_type std|std_rev kept topk(int(ratio × groups)) by std. */
function translateV1FilterType(store: LeafStore, notices: string[], fail: Fail): void {
  const typeLeaf = store.get([...R.split(".").slice(0, 2), "rollout_filter_type"]);
  if (!typeLeaf || (typeLeaf.value !== "std" && typeLeaf.value !== "std_rev")) return;
  const typeKey = `${R}rollout_filter_type`;
  for (const other of ["rollout_filter_strategy", "rollout_filter_value", "rollout_filter_metric"]) {
    // Current-era filter keys from an earlier source (e.g. base.yaml) give way to the V1 setting.
    if ((store.get(["actor_rollout_ref", "rollout", other])?.source ?? -1) >= typeLeaf.source) {
      fail(
        typeLeaf,
        typeKey,
        `${typeKey}=${formatValue(typeLeaf.value)} is RAGEN V1's filter and cannot be combined with ${R}${other}; ` +
          "allowed: largest or smallest (with rollout_filter_strategy, rollout_filter_value, rollout_filter_metric)",
      );
    }
  }
  const ratio = store.get(["actor_rollout_ref", "rollout", "rollout_filter_ratio"])?.value ?? 0.25;
  const type = typeLeaf.value === "std" ? "largest" : "smallest";
  const source = typeLeaf.source;
  store.set(["actor_rollout_ref", "rollout", "rollout_filter_type"], type, source);
  store.set(["actor_rollout_ref", "rollout", "rollout_filter_strategy"], "top_k", source);
  store.set(["actor_rollout_ref", "rollout", "rollout_filter_metric"], "reward_variance", source);
  store.set(
    ["actor_rollout_ref", "rollout", "rollout_filter_value"],
    ratio,
    source,
    `${R}rollout_filter_ratio`,
  );
  notices.push(
    `${typeKey}=${formatValue(typeLeaf.value)} (RAGEN V1: keep int(ratio × groups) groups by in-group reward std) → ` +
      `rollout_filter_strategy=top_k, rollout_filter_type=${type}, rollout_filter_metric=reward_variance, ` +
      `rollout_filter_value=${formatValue(ratio)} (RAGEN today also keeps at least one group)`,
  );
}

function noteDeadFilterRatio(store: LeafStore, notices: string[]): void {
  const ratio = store.get(["actor_rollout_ref", "rollout", "rollout_filter_ratio"]);
  const value = store.get(["actor_rollout_ref", "rollout", "rollout_filter_value"]);
  if (ratio && !value) {
    notices.push(
      `${R}rollout_filter_ratio=${formatValue(ratio.value)} has no effect: ${R}rollout_filter_value (1.0 in ` +
        `RAGEN's base.yaml) takes precedence, as in RAGEN; set ${R}rollout_filter_value=null to use the ratio`,
    );
  }
}

function noteContextWindow(config: Record<string, unknown>, notices: string[]): void {
  const proxy = config.agent_proxy as { context_window_mode?: unknown; max_context_window?: unknown };
  if (proxy.context_window_mode === CONTEXT_WINDOW_MODES[0] && proxy.max_context_window !== -1) {
    notices.push(
      `agent_proxy.max_context_window=${formatValue(proxy.max_context_window)} with context_window_mode=full: ` +
        "no effect, as in RAGEN, which applies the window only in limited_multi_turn and single_turn",
    );
  }
}
