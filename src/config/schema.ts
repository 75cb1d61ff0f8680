// rollgym's configuration: the rollout-side subset of RAGEN's Hydra config, keyed by RAGEN's
// current names (mll-lab-nu/RAGEN config/base.yaml@20daedc) so pasted RAGEN settings mean what
// they meant there, plus rollgym's own `rollgym.*` section. Defaults are base.yaml's values;
// keys base.yaml leaves to verl's ppo_trainer.yaml (top_p, top_k, val_kwargs.top_p/top_k) take
// verl's defaults, and min_p takes vLLM's.
import { DEFAULT_ROLLOUT_LIMITS, SEED_MAX } from "../rollout/limits.ts";

export const CONTEXT_WINDOW_MODES = ["full", "limited_multi_turn", "single_turn"] as const;
export type ContextWindowMode = (typeof CONTEXT_WINDOW_MODES)[number];
export const NORMALIZATION_GROUPINGS = ["state", "inductive", "batch"] as const;
export type NormalizationGrouping = (typeof NORMALIZATION_GROUPINGS)[number];
export const NORMALIZATION_METHODS = ["identity", "mean", "mean_std", "asym_clip"] as const;
export type NormalizationMethod = (typeof NORMALIZATION_METHODS)[number];
export const FILTER_STRATEGIES = ["top_p", "top_k", "top_k_abs", "min_p"] as const;
export type RolloutFilterStrategy = (typeof FILTER_STRATEGIES)[number];
export const FILTER_TYPES = ["largest", "smallest"] as const;
export type RolloutFilterType = (typeof FILTER_TYPES)[number];
export const FILTER_METRICS = ["reward_variance", "reward", "reward_sum"] as const;
export type RolloutFilterMetric = (typeof FILTER_METRICS)[number];
export const TOP_P_PROB_MODES = ["linear", "softmax"] as const;
export type TopPProbMode = (typeof TOP_P_PROB_MODES)[number];
export const BUCKET_MODES = ["quantile", "fixed_rv"] as const;
export type BucketMode = (typeof BUCKET_MODES)[number];
export const MODES = ["train", "val"] as const;
export type RollgymMode = (typeof MODES)[number];
export const POLICY_NAMES = ["oracle", "random"] as const;
export type PolicyName = (typeof POLICY_NAMES)[number];

/** `es_manager.train` / `es_manager.val`: RAGEN's env layout for one mode. */
export interface EnvGroupLayout {
  /** Groups per rollout; every group shares one seed (one prompt). */
  env_groups: number;
  /** Envs per group. */
  group_size: number;
  env_configs: {
    tags: string[];
    /** Groups per tag, in tag order; must sum to env_groups. */
    n_groups: number[];
  };
}

/**
 * A `custom_envs.<Tag>` entry as written by the user: every field optional, overlaid by the
 * caller on the env registry's entry for that tag. `env_config` is plain data, a partial overlay
 * deep-merged across config sources (null means "the env's defaults", as in RAGEN).
 */
export interface CustomEnvEntry {
  env_type?: string;
  max_actions_per_traj?: number;
  env_instruction?: string;
  max_tokens?: number;
  parallel_friendly?: boolean;
  max_workers?: number;
  env_config?: Record<string, unknown> | null;
}

export interface RollgymConfig {
  es_manager: {
    /** Added once to the episode penalty per turn whose actions did not all map. */
    format_penalty: number;
    train: EnvGroupLayout;
    val: EnvGroupLayout;
  };
  seed: {
    /** Base of the train seed schedule; null = a random seed per rollout (RAGEN). */
    train: number | null;
    /** Val seed base; every validation reuses it. */
    val: number;
  };
  agent_proxy: {
    max_turn: number;
    max_actions_per_turn: number;
    action_sep: string;
    enable_think: boolean;
    context_window_mode: ContextWindowMode;
    /** -1 = the whole history. */
    max_context_window: number;
    use_turn_scores: boolean;
    reward_normalization: { grouping: NormalizationGrouping; method: NormalizationMethod };
  };
  actor_rollout_ref: {
    rollout: {
      temperature: number;
      top_p: number;
      /** -1 (or 0) disables. */
      top_k: number;
      min_p: number;
      /** Max new tokens per turn. */
      response_length: number;
      /** Prompt budget in tokens; older turns are dropped beyond it. */
      /** Prompt + max_tokens limit in tokens; "auto" = the engine's own. */
      max_model_len: number | "auto";
      val_kwargs: { do_sample: boolean; temperature: number; top_p: number; top_k: number };
      rollout_filter_strategy: RolloutFilterStrategy;
      /** null = absent: the legacy rollout_filter_ratio is used (see effectiveFilterValue). */
      rollout_filter_value: number | null;
      rollout_filter_ratio: number;
      rollout_filter_top_p_prob_mode: TopPProbMode;
      rollout_filter_type: RolloutFilterType;
      rollout_filter_include_zero: boolean;
      rollout_filter_metric: RolloutFilterMetric;
      rollout_filter_selection_eps: number;
      gradient_analysis_num_buckets: number;
      gradient_analysis_bucket_mode: BucketMode;
    };
  };
  custom_envs: Record<string, CustomEnvEntry>;
  rollgym: {
    mode: RollgymMode;
    llm: {
      /** OpenAI-compatible endpoints (one per engine replica); null = use the built-in policy. */
      base_url: string[] | null;
      /** null = read OPENAI_API_KEY when the client is made. */
      api_key: string | null;
      model: string | null;
      /** Requests in flight per replica. */
      concurrency: number;
      /** Timeout of one request. */
      timeout_s: number;
      /** Wall time one turn may spend retrying (outages, restarts, aborts) before its episode fails. */
      retry_budget_s: number;
      /** Optional cap on attempts per turn on top of the time budget; null = no cap. */
      max_retries: number | null;
      /** Sampling fields a server's generation config would otherwise fill (RAGEN samples with 1, 0, 0). */
      repetition_penalty: number;
      presence_penalty: number;
      frequency_penalty: number;
      /** Merged into every request body (e.g. chat_template_kwargs). */
      extra_body: Record<string, unknown> | null;
      /** A GBNF grammar file, sent in the engine's dialect. */
      grammar: string | null;
      /** The engine's request dialect; auto = detected once at start-up from its routes. */
      dialect: "auto" | "vllm" | "llamacpp";
      /** max_tokens is lowered to fit the context window, never below this. */
      min_response_tokens: number;
      /**
       * "continue": send the generation prompt's "<think>" as an assistant prefill the server
       * continues (vLLM's continue_final_message); "none": send no prefill.
       */
      prefill: "continue" | "none";
      /**
       * "engine": prompts are counted exactly by the engine (vLLM's /tokenize, llama.cpp's
       * input_tokens); "usage": no count requests (a gateway that forwards only /v1/*), the
       * window is kept from the usage.prompt_tokens answers report plus upper bounds.
       */
      count_tokens: "engine" | "usage";
      /** Send the per-request seed derived from the batch seed (false: none, vLLM's faster batched sampling). */
      request_seeds: boolean;
    };
    context: {
      /** "turns": drop the oldest complete turns; "ragen": RAGEN's _apply_max_length. */
      truncation: "turns" | "ragen";
    };
    policy: {
      name: PolicyName;
      /** Probability that an answer is random valid actions. */
      noise: number;
      /** Probability that an answer breaks the format. */
      malformed: number;
    };
    /** Train rollouts RAGEN would already have done (0 = first): seed = seed.train + step × env_groups. */
    step: number;
    /** Explicit batch seed; overrides the schedule. */
    seed: number | null;
    /** Token in, token out: episodes keep their exact token logs (remote engines only). */
    tokens: boolean;
    /** Episode reward = 1 if solved else 0 (old RAGEN's training.binary_reward). */
    binary_reward: boolean;
    /** Observation cap in tokens (old RAGEN's training.max_obs_length); null = none. */
    max_obs_length: number | null;
    /** Modules that register env types and tags (paths from the current directory, or package names). */
    plugins: string[];
    /** Checked before a rollout starts, by `rollgym rollout` and by the server alike. */
    limits: {
      max_groups_per_rollout: number;
      max_episodes_in_flight: number;
      /** Groups of one rollout the server plays at once (`rollgym serve --group-concurrency`). */
      group_concurrency: number;
    };
  };
}

/** A fresh copy of the defaults (RAGEN base.yaml@20daedc values). */
export function defaultConfig(): RollgymConfig {
  return {
    es_manager: {
      format_penalty: -0.1,
      train: { env_groups: 8, group_size: 16, env_configs: { tags: ["CoordSokoban"], n_groups: [8] } },
      val: { env_groups: 512, group_size: 1, env_configs: { tags: ["CoordSokoban"], n_groups: [512] } },
    },
    seed: { train: 10000, val: 123 },
    agent_proxy: {
      max_turn: 5,
      max_actions_per_turn: 2,
      action_sep: "||",
      enable_think: true,
      context_window_mode: "full",
      max_context_window: -1,
      use_turn_scores: false,
      reward_normalization: { grouping: "state", method: "identity" },
    },
    actor_rollout_ref: {
      rollout: {
        temperature: 1,
        top_p: 1.0,
        top_k: -1,
        min_p: 0,
        response_length: 400,
        max_model_len: "auto",
        val_kwargs: { do_sample: true, temperature: 0.5, top_p: 1.0, top_k: -1 },
        rollout_filter_strategy: "top_p",
        rollout_filter_value: 1.0,
        // RAGEN's code falls back to 0.25 when rollout_filter_value is absent.
        rollout_filter_ratio: 0.25,
        rollout_filter_top_p_prob_mode: "linear",
        rollout_filter_type: "largest",
        rollout_filter_include_zero: true,
        rollout_filter_metric: "reward_variance",
        rollout_filter_selection_eps: 0.01,
        gradient_analysis_num_buckets: 6,
        gradient_analysis_bucket_mode: "quantile",
      },
    },
    custom_envs: {},
    rollgym: {
      mode: "train",
      llm: {
        base_url: null,
        api_key: null,
        model: null,
        concurrency: 256,
        timeout_s: 120,
        retry_budget_s: 300,
        max_retries: null,
        repetition_penalty: 1,
        presence_penalty: 0,
        frequency_penalty: 0,
        extra_body: null,
        grammar: null,
        dialect: "auto",
        min_response_tokens: 32,
        prefill: "continue",
        count_tokens: "engine",
        request_seeds: true,
      },
      context: { truncation: "turns" },
      policy: { name: "oracle", noise: 0, malformed: 0 },
      step: 0,
      seed: null,
      tokens: false,
      binary_reward: false,
      max_obs_length: null,
      plugins: [],
      limits: {
        max_groups_per_rollout: DEFAULT_ROLLOUT_LIMITS.maxGroupsPerRollout,
        max_episodes_in_flight: DEFAULT_ROLLOUT_LIMITS.maxEpisodesInFlight,
        group_concurrency: 64,
      },
    },
  };
}

/** The filter threshold RAGEN uses: rollout_filter_value, else the legacy rollout_filter_ratio. */
export function effectiveFilterValue(config: RollgymConfig): number {
  const rollout = config.actor_rollout_ref.rollout;
  return rollout.rollout_filter_value ?? rollout.rollout_filter_ratio;
}

/** A config problem; `key` is the full dotted key at fault (null for file-level errors). */
export class ConfigError extends Error {
  readonly key: string | null;
  readonly file: string | undefined;
  readonly line: number | undefined;
  constructor(key: string | null, message: string, where: { file?: string; line?: number } = {}) {
    super(message);
    this.name = "ConfigError";
    this.key = key;
    this.file = where.file;
    this.line = where.line;
  }
}

export type FieldSpec =
  | {
      kind: "int";
      min?: number;
      max?: number;
      except?: readonly number[];
      nullable?: boolean;
      auto?: boolean;
    }
  | { kind: "number"; min?: number; max?: number; minExclusive?: boolean; nullable?: boolean }
  | { kind: "bool" }
  | { kind: "string"; nonEmpty?: boolean; nullable?: boolean; url?: boolean }
  | { kind: "enum"; values: readonly string[]; aliases?: Readonly<Record<string, string>> }
  | { kind: "tags" }
  | { kind: "counts" }
  | { kind: "data" }
  /** A list of non-empty strings (a single string is a one-item list). */
  | { kind: "strings" }
  /** One http(s) URL, a comma-separated list, or a YAML list; normalized to a list. */
  | { kind: "urls" };

const int = (
  min: number,
  extra: Partial<{ max: number; nullable: boolean; auto: boolean }> = {},
): FieldSpec => ({
  kind: "int",
  min,
  ...extra,
});
const bool: FieldSpec = { kind: "bool" };
const prob: FieldSpec = { kind: "number", min: 0, max: 1 };
const topP: FieldSpec = { kind: "number", min: 0, minExclusive: true, max: 1 };
const nonNegative: FieldSpec = { kind: "number", min: 0 };
const topK: FieldSpec = int(-1);
const layout = (mode: string): Record<string, FieldSpec> => ({
  [`es_manager.${mode}.env_groups`]: int(1),
  [`es_manager.${mode}.group_size`]: int(1),
  [`es_manager.${mode}.env_configs.tags`]: { kind: "tags" },
  [`es_manager.${mode}.env_configs.n_groups`]: { kind: "counts" },
});

/** Every leaf of RollgymConfig except custom_envs, by dotted key. */
export const FIELD_SPECS: Readonly<Record<string, FieldSpec>> = {
  "es_manager.format_penalty": { kind: "number" },
  ...layout("train"),
  ...layout("val"),
  "seed.train": int(0, { max: SEED_MAX, nullable: true }),
  "seed.val": int(0, { max: SEED_MAX }),
  "agent_proxy.max_turn": int(1),
  "agent_proxy.max_actions_per_turn": int(1),
  "agent_proxy.action_sep": { kind: "string", nonEmpty: true },
  "agent_proxy.enable_think": bool,
  "agent_proxy.context_window_mode": { kind: "enum", values: CONTEXT_WINDOW_MODES },
  // RAGEN slices history[-k:], so k = 0 would silently mean "everything".
  "agent_proxy.max_context_window": { kind: "int", min: -1, except: [0] },
  "agent_proxy.use_turn_scores": bool,
  "agent_proxy.reward_normalization.grouping": { kind: "enum", values: NORMALIZATION_GROUPINGS },
  "agent_proxy.reward_normalization.method": { kind: "enum", values: NORMALIZATION_METHODS },
  "actor_rollout_ref.rollout.temperature": nonNegative,
  "actor_rollout_ref.rollout.top_p": topP,
  "actor_rollout_ref.rollout.top_k": topK,
  "actor_rollout_ref.rollout.min_p": prob,
  "actor_rollout_ref.rollout.response_length": int(1),
  "actor_rollout_ref.rollout.max_model_len": int(1, { auto: true }),
  "actor_rollout_ref.rollout.val_kwargs.do_sample": bool,
  "actor_rollout_ref.rollout.val_kwargs.temperature": nonNegative,
  "actor_rollout_ref.rollout.val_kwargs.top_p": topP,
  "actor_rollout_ref.rollout.val_kwargs.top_k": topK,
  "actor_rollout_ref.rollout.rollout_filter_strategy": { kind: "enum", values: FILTER_STRATEGIES },
  "actor_rollout_ref.rollout.rollout_filter_value": { kind: "number", min: 0, nullable: true },
  "actor_rollout_ref.rollout.rollout_filter_ratio": nonNegative,
  "actor_rollout_ref.rollout.rollout_filter_top_p_prob_mode": { kind: "enum", values: TOP_P_PROB_MODES },
  "actor_rollout_ref.rollout.rollout_filter_type": { kind: "enum", values: FILTER_TYPES },
  "actor_rollout_ref.rollout.rollout_filter_include_zero": bool,
  // RAGEN lower-cases the metric and maps reward_std to reward_variance (build_rollout_filter).
  "actor_rollout_ref.rollout.rollout_filter_metric": {
    kind: "enum",
    values: FILTER_METRICS,
    aliases: { reward_std: "reward_variance" },
  },
  "actor_rollout_ref.rollout.rollout_filter_selection_eps": nonNegative,
  "actor_rollout_ref.rollout.gradient_analysis_num_buckets": int(1),
  "actor_rollout_ref.rollout.gradient_analysis_bucket_mode": { kind: "enum", values: BUCKET_MODES },
  "rollgym.mode": { kind: "enum", values: MODES },
  "rollgym.llm.base_url": { kind: "urls" },
  "rollgym.llm.api_key": { kind: "string", nonEmpty: true, nullable: true },
  "rollgym.llm.model": { kind: "string", nonEmpty: true, nullable: true },
  "rollgym.llm.concurrency": int(1),
  "rollgym.llm.timeout_s": { kind: "number", min: 0, minExclusive: true, max: 86_400 },
  "rollgym.llm.retry_budget_s": { kind: "number", min: 0, minExclusive: true, max: 86_400 },
  "rollgym.llm.max_retries": int(0, { nullable: true }),
  "rollgym.llm.repetition_penalty": { kind: "number", min: 0, minExclusive: true },
  "rollgym.llm.presence_penalty": { kind: "number", min: -2, max: 2 },
  "rollgym.llm.frequency_penalty": { kind: "number", min: -2, max: 2 },
  "rollgym.llm.extra_body": { kind: "data" },
  "rollgym.llm.grammar": { kind: "string", nonEmpty: true, nullable: true },
  "rollgym.llm.dialect": { kind: "enum", values: ["auto", "vllm", "llamacpp"] },
  "rollgym.llm.min_response_tokens": int(1),
  "rollgym.llm.prefill": { kind: "enum", values: ["continue", "none"] },
  "rollgym.llm.count_tokens": { kind: "enum", values: ["engine", "usage"] },
  "rollgym.llm.request_seeds": bool,
  "rollgym.context.truncation": { kind: "enum", values: ["turns", "ragen"] },
  "rollgym.policy.name": { kind: "enum", values: POLICY_NAMES },
  "rollgym.policy.noise": prob,
  "rollgym.policy.malformed": prob,
  "rollgym.step": int(0),
  "rollgym.seed": int(0, { max: SEED_MAX, nullable: true }),
  "rollgym.binary_reward": bool,
  "rollgym.tokens": bool,
  "rollgym.max_obs_length": int(1, { nullable: true }),
  "rollgym.plugins": { kind: "strings" },
  "rollgym.limits.max_groups_per_rollout": int(1),
  "rollgym.limits.max_episodes_in_flight": int(1),
  "rollgym.limits.group_concurrency": int(1),
};

/** Fields of a custom_envs.<Tag> entry. */
export const CUSTOM_ENV_SPECS: Readonly<Record<string, FieldSpec>> = {
  env_type: { kind: "string", nonEmpty: true },
  max_actions_per_traj: int(1),
  env_instruction: { kind: "string" },
  max_tokens: int(1),
  parallel_friendly: bool,
  max_workers: int(1),
  env_config: { kind: "data" },
};

/** What a spec allows, in words, for error messages. */
export function describeAllowed(spec: FieldSpec): string {
  const orNull = (text: string, nullable: boolean | undefined): string =>
    nullable ? `${text}, or null` : text;
  switch (spec.kind) {
    case "int": {
      let text = "an integer";
      if (spec.min !== undefined && spec.max !== undefined) text += ` from ${spec.min} to ${spec.max}`;
      else if (spec.min !== undefined) text += ` >= ${spec.min}`;
      if (spec.except) text += ` except ${spec.except.join(", ")}`;
      if (spec.auto) text += ", or auto";
      return orNull(text, spec.nullable);
    }
    case "number": {
      let text = "a finite number";
      const low = spec.min === undefined ? "" : `${spec.minExclusive ? ">" : ">="} ${spec.min}`;
      const high = spec.max === undefined ? "" : `<= ${spec.max}`;
      if (low && high) text += ` ${low} and ${high}`;
      else if (low || high) text += ` ${low || high}`;
      return orNull(text, spec.nullable);
    }
    case "bool":
      return "true or false";
    case "string":
      return orNull(
        spec.url ? "an http(s) URL" : spec.nonEmpty ? "a non-empty string" : "a string",
        spec.nullable,
      );
    case "enum": {
      const aliases = Object.entries(spec.aliases ?? {}).map(([from, to]) => `${from} (= ${to})`);
      return `one of ${[...spec.values, ...aliases].join(", ")}`;
    }
    case "tags":
      return "a non-empty list of env tag names";
    case "counts":
      return "a non-empty list of integers >= 0";
    case "data":
      return "a mapping, or null";
    case "strings":
      return "a list of non-empty strings";
    case "urls":
      return "an http(s) URL, a comma-separated list or a list of them, or null";
  }
}

/** Renders a value for a message the way it would be written in YAML/JSON. */
export function formatValue(value: unknown): string {
  if (value === undefined) return "nothing";
  if (typeof value === "string") return JSON.stringify(value);
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Checks one value against its spec; returns it normalized (enum aliases resolved). */
export function checkField(key: string, spec: FieldSpec, value: unknown): unknown {
  const fail = (): never => {
    throw new ConfigError(
      key,
      `invalid value for ${key}: ${formatValue(value)}; allowed: ${describeAllowed(spec)}`,
    );
  };
  if (value === null) {
    if (("nullable" in spec && spec.nullable) || spec.kind === "data" || spec.kind === "urls") return null;
    return fail();
  }
  switch (spec.kind) {
    case "int":
      if (spec.auto && value === "auto") return value;
      if (!Number.isSafeInteger(value)) return fail();
      if (spec.min !== undefined && (value as number) < spec.min) return fail();
      if (spec.max !== undefined && (value as number) > spec.max) return fail();
      if (spec.except?.includes(value as number)) return fail();
      return value;
    case "number": {
      if (typeof value !== "number" || !Number.isFinite(value)) return fail();
      const n = value as number;
      if (spec.min !== undefined && (spec.minExclusive ? n <= spec.min : n < spec.min)) return fail();
      if (spec.max !== undefined && n > spec.max) return fail();
      return n;
    }
    case "bool":
      return typeof value === "boolean" ? value : fail();
    case "string":
      if (typeof value !== "string") return fail();
      if ((spec.nonEmpty || spec.url) && value.trim() === "") return fail();
      if (spec.url && !/^https?:$/.test(URL.parse(value)?.protocol ?? "")) return fail();
      return value;
    case "enum": {
      if (typeof value !== "string") return fail();
      if (spec.values.includes(value)) return value;
      const alias = spec.aliases?.[value];
      return alias ?? fail();
    }
    case "tags":
      if (!Array.isArray(value) || value.length === 0) return fail();
      if (!value.every((tag) => typeof tag === "string" && tag.trim() !== "")) return fail();
      return [...value];
    case "counts":
      if (!Array.isArray(value) || value.length === 0) return fail();
      if (!value.every((n) => Number.isSafeInteger(n) && n >= 0)) return fail();
      return [...value];
    case "data":
      return isPlainObject(value) ? structuredClone(value) : fail();
    case "strings": {
      const list = typeof value === "string" ? [value] : value;
      if (!Array.isArray(list) || !list.every((s) => typeof s === "string" && s.trim() !== "")) return fail();
      return [...list];
    }
    case "urls": {
      const list = typeof value === "string" ? value.split(",").map((u) => u.trim()) : value;
      if (!Array.isArray(list) || list.length === 0) return fail();
      const isUrl = (u: unknown) =>
        typeof u === "string" && /^https?:$/.test(URL.parse(u)?.protocol ?? "") && u.trim() === u;
      if (!list.every(isUrl)) return fail();
      if (new Set(list).size !== list.length) return fail();
      return [...list];
    }
  }
}

function getPath(root: unknown, key: string): unknown {
  let node = root;
  for (const part of key.split(".")) node = isPlainObject(node) ? node[part] : undefined;
  return node;
}

function setPath(root: Record<string, unknown>, key: string, value: unknown): void {
  const parts = key.split(".");
  let node = root;
  for (const part of parts.slice(0, -1)) node = node[part] as Record<string, unknown>;
  node[parts[parts.length - 1]] = value;
}

/** RAGEN's es_manager asserts, checked with its meaning. */
function checkLayout(config: RollgymConfig, mode: "train" | "val"): void {
  const prefix = `es_manager.${mode}`;
  const { env_groups, env_configs } = config.es_manager[mode];
  const { tags, n_groups } = env_configs;
  if (tags.length !== n_groups.length) {
    throw new ConfigError(
      `${prefix}.env_configs.n_groups`,
      `invalid value for ${prefix}.env_configs.n_groups: ${formatValue(n_groups)} has ${n_groups.length} ` +
        `${n_groups.length === 1 ? "entry" : "entries"} but ${prefix}.env_configs.tags ${formatValue(tags)} has ${tags.length}; ` +
        "allowed: one group count per tag (RAGEN gives tags[i] n_groups[i] groups and asserts equal lengths)",
    );
  }
  const sum = n_groups.reduce((a, b) => a + b, 0);
  if (sum !== env_groups) {
    throw new ConfigError(
      `${prefix}.env_configs.n_groups`,
      `invalid value for ${prefix}.env_configs.n_groups: ${formatValue(n_groups)} sums to ${sum} but ` +
        `${prefix}.env_groups is ${env_groups}; allowed: counts summing to env_groups (RAGEN lays out ` +
        `n_groups[i] groups of tags[i], group_size envs each, and asserts sum(n_groups) == env_groups)` +
        (tags.length === 1 ? `; with one tag set ${prefix}.env_configs.n_groups=[${env_groups}]` : ""),
    );
  }
}

/**
 * Validates a whole config (types, ranges, enums, RAGEN's layout asserts) and returns a
 * normalized copy. Throws ConfigError naming the first bad key.
 */
export function validateConfig(config: RollgymConfig): RollgymConfig {
  const out = structuredClone(config);
  const root = out as unknown as Record<string, unknown>;
  for (const [key, spec] of Object.entries(FIELD_SPECS)) {
    setPath(root, key, checkField(key, spec, getPath(root, key)));
  }
  if (!isPlainObject(out.custom_envs)) {
    throw new ConfigError(
      "custom_envs",
      `invalid value for custom_envs: ${formatValue(out.custom_envs)}; allowed: a mapping of tag to entry`,
    );
  }
  for (const [tag, entry] of Object.entries(out.custom_envs)) {
    const prefix = `custom_envs.${tag}`;
    if (!isPlainObject(entry)) {
      throw new ConfigError(
        prefix,
        `invalid value for ${prefix}: ${formatValue(entry)}; allowed: a mapping of env keys`,
      );
    }
    const record = entry as Record<string, unknown>;
    for (const [field, value] of Object.entries(record)) {
      const spec = CUSTOM_ENV_SPECS[field];
      if (!spec) {
        throw new ConfigError(
          `${prefix}.${field}`,
          `unknown config key ${prefix}.${field}; allowed keys: ${Object.keys(CUSTOM_ENV_SPECS).join(", ")}`,
        );
      }
      record[field] = checkField(`${prefix}.${field}`, spec, value);
    }
  }
  checkLayout(out, "train");
  checkLayout(out, "val");
  return out;
}
