// rollgym's configuration keys, each a TypeBox schema with its default and description: the
// rollout-side subset of RAGEN's Hydra config, keyed by RAGEN's current names
// (mll-lab-nu/RAGEN config/base.yaml@20daedc) so pasted RAGEN settings mean what they meant
// there, plus rollgym's own `rollgym.*` section. Defaults are base.yaml's values; keys base.yaml
// leaves to verl's ppo_trainer.yaml (top_p, top_k, val_kwargs.top_p/top_k) take verl's
// defaults, and min_p takes vLLM's. Sampling, filter and episode keys come from the settings
// tables beside the wire schemas (protocol/settings.ts), so each is defined once.
import { type Static, type TSchema, type TUnsafe, Type } from "typebox";
import { isPlainObject } from "../../protocol/plain-object.ts";
import {
  ASYNC,
  BUCKET_MODES,
  CONTEXT_WINDOW_MODES,
  EPISODE,
  FILTER,
  LIMITS,
  MAX_SEED,
  MODES,
  NORMALIZATION_GROUPINGS,
  NORMALIZATION_METHODS,
  SAMPLING,
  type Setting,
} from "../../protocol/settings.ts";

export const POLICY_NAMES = ["oracle", "random"] as const;
export type PolicyName = (typeof POLICY_NAMES)[number];

/**
 * A configuration leaf: a schema with `default` and `description`, and optionally `x-allowed`
 * (what is allowed, in words, where the schema's own words would not do) and `x-coerce` (a
 * string accepted for a list: one item, or comma-separated items).
 */
export type Leaf<T extends TSchema = TSchema> = T & {
  default: Static<T>;
  description: string;
  "x-allowed"?: string;
  "x-coerce"?: "one" | "comma";
  "x-except"?: readonly number[];
  "x-config"?: Setting["x-config"];
};

const doc = <T>(value: T, description: string) => ({ default: value, description });
/** A configuration leaf whose static type is `T` (the unions and refinements below spell it poorly). */
const leaf = <T>(schema: TSchema): Leaf<TUnsafe<T>> => schema as Leaf<TUnsafe<T>>;

const isHttpUrl = (u: string): boolean => /^https?:$/.test(URL.parse(u)?.protocol ?? "") && u.trim() === u;
const NON_EMPTY = "\\S";
const nonEmpty = (options: object = {}) => Type.String({ pattern: NON_EMPTY, ...options });

/**
 * An integer from `min` (to `max`), never one of `except`. Annotations go in before Refine: a
 * spread of a refined schema drops its refinement.
 */
function integer(
  min: number,
  extra: { max?: number; except?: readonly number[] } = {},
  options: object = {},
) {
  const except = extra.except ?? [];
  return Type.Refine(
    Type.Integer({
      minimum: min,
      ...(extra.max === undefined ? {} : { maximum: extra.max }),
      ...(extra.except ? { "x-except": extra.except } : {}),
      ...options,
    }),
    (n) => Number.isSafeInteger(n) && !except.includes(n),
    () => "must be a safe integer",
  );
}

const int = (
  min: number,
  value: number,
  description: string,
  extra: { max?: number; except?: readonly number[] } = {},
) => leaf<number>(integer(min, extra, doc(value, description)));
/** `member` or null; the union carries the default and description. */
const orNull = <T>(member: TSchema, value: T | null, description: string) =>
  leaf<T | null>(Type.Union([member, Type.Null()], doc(value, description)));
const num = (range: Record<string, number>, value: number, description: string) =>
  leaf<number>(Type.Number({ ...range, ...doc(value, description) }));
const bool = (value: boolean, description: string) => leaf<boolean>(Type.Boolean(doc(value, description)));
const choice = <const Values extends readonly string[]>(
  values: Values,
  value: Values[number],
  description: string,
) => leaf<Values[number]>(Type.Enum([...values], doc(value, description)));

/** A free-form mapping (merged key by key like the rest), or null. */
const data = (description: string) =>
  leaf<Record<string, unknown> | null>(
    Type.Union(
      [
        Type.Refine(Type.Record(Type.String(), Type.Unknown()), isPlainObject, () => "must be a mapping"),
        Type.Null(),
      ],
      { ...doc(null, description), "x-allowed": "a mapping, or null" },
    ),
  );

const layout = <const Mode extends "train" | "val">(mode: Mode, groups: number, size: number) => {
  const p = `es_manager.${mode}`;
  return {
    [`${p}.env_groups`]: int(
      1,
      groups,
      `${mode} groups per batch (= Σ n_groups); a group's episodes share one seed`,
    ),
    [`${p}.group_size`]: int(1, size, `${mode} episodes per group`),
    [`${p}.env_configs.tags`]: leaf<string[]>(
      Type.Array(nonEmpty(), {
        minItems: 1,
        ...doc(["CoordSokoban"], `${mode} tags, in env-id order`),
        "x-allowed": "a non-empty list of env tag names",
      }),
    ),
    [`${p}.env_configs.n_groups`]: leaf<number[]>(
      Type.Array(Type.Integer({ minimum: 0 }), {
        minItems: 1,
        ...doc([groups], `${mode} groups per tag, in tag order; must sum to env_groups`),
        "x-allowed": "a non-empty list of integers >= 0",
      }),
    ),
  } as {
    [K in `es_manager.${Mode}.env_groups` | `es_manager.${Mode}.group_size`]: Leaf<TUnsafe<number>>;
  } & { [K in `es_manager.${Mode}.env_configs.tags`]: Leaf<TUnsafe<string[]>> } & {
    [K in `es_manager.${Mode}.env_configs.n_groups`]: Leaf<TUnsafe<number[]>>;
  };
};

/** A setting at its configuration key. */
function at<S extends Setting>(setting: S): { [K in S["x-config"]["key"]]: S } {
  return { [setting["x-config"].key]: setting } as { [K in S["x-config"]["key"]]: S };
}

type Replacing<Table extends Record<string, Setting>> = { [F in keyof Table]?: Record<string, Leaf> };
/** The one type of a union of key tables. */
type Joined<U> = [U] extends [never]
  ? unknown
  : (U extends unknown ? (u: U) => void : never) extends (joined: infer J) => void
    ? J
    : never;
/** A table's settings at their keys, with `Instead`'s keys in the place of the settings it names. */
type SettingsAt<Table extends Record<string, Setting>, Instead extends Replacing<Table>> = {
  [F in Exclude<keyof Table, keyof Instead> as Table[F]["x-config"]["key"]]: Table[F];
} & Joined<Instead[keyof Instead]>;

/**
 * Every setting of a table at its configuration key, in table order, so a new setting is a new
 * key with nothing else to write; `instead` puts other keys in the place of some setting's.
 */
function settingsAt<
  Table extends Record<string, Setting>,
  const Instead extends Replacing<Table> = Record<never, never>,
>(table: Table, instead: Instead = {} as Instead): SettingsAt<Table, Instead> {
  const place: Replacing<Table> = instead;
  const entries = Object.entries(table).flatMap(([name, setting]) =>
    Object.entries(place[name] ?? at(setting)),
  );
  return Object.fromEntries(entries) as SettingsAt<Table, Instead>;
}

type SettingsUnder<Table extends Record<string, Setting>, Prefix extends string> = {
  [F in keyof Table as Table[F]["x-config"]["key"] extends `${Prefix}.${infer Rest}`
    ? Rest extends `${string}.${string}`
      ? never
      : Table[F]["x-config"]["key"]
    : never]: Table[F];
};

/** Every setting of a table whose key sits directly under `prefix`, in table order. */
function under<Table extends Record<string, Setting>, const Prefix extends string>(
  table: Table,
  prefix: Prefix,
): SettingsUnder<Table, Prefix> {
  const entries = Object.values(table)
    .map((s) => [s["x-config"].key, s] as const)
    .filter(([key]) => key.startsWith(`${prefix}.`) && !key.slice(prefix.length + 1).includes("."));
  return Object.fromEntries(entries) as SettingsUnder<Table, Prefix>;
}

/** A sampling setting's validation key (RAGEN's val_kwargs), with that key's default. */
function valOf<const Name extends "temperature" | "top_p" | "top_k">(name: Name) {
  const setting = SAMPLING[name];
  const val = setting["x-config"].val as { key: string; default: unknown };
  const { "x-config": _config, ...schema } = setting;
  return { [val.key]: { ...schema, ...doc(val.default, `validation ${setting.description}`) } } as {
    [K in `actor_rollout_ref.rollout.val_kwargs.${Name}`]: Leaf<(typeof SAMPLING)[Name]>;
  };
}

/** A schema without its setting annotations, to stand in a union. */
function bare(setting: Setting): TSchema {
  const { default: _d, description: _s, "x-config": _c, ...schema } = setting;
  return schema;
}

const R = "actor_rollout_ref.rollout";
const seed = (options: object = {}) => integer(0, { max: MAX_SEED }, options);

/** Every configuration key but custom_envs, in the order of a written config. */
export const CONFIG_KEYS = {
  "es_manager.format_penalty": num(
    {},
    -0.1,
    "added once to the episode penalty per turn whose actions did not all map",
  ),
  ...layout("train", 8, 16),
  ...layout("val", 512, 1),
  "seed.train": orNull<number>(
    seed(),
    10000,
    "train base seed (batch seed = base + step × env_groups); null = a random seed per batch (RAGEN)",
  ),
  "seed.val": leaf<number>(
    seed(doc(123, "validation seed base; every validation reuses it (the same puzzles)")),
  ),
  ...settingsAt(EPISODE, {
    max_actions_per_turn: {
      ...at(EPISODE.max_actions_per_turn),
      "agent_proxy.action_sep": leaf<string>(nonEmpty(doc("||", "action separator"))),
    },
  }),
  "agent_proxy.context_window_mode": choice(CONTEXT_WINDOW_MODES, "full", "how much history a prompt shows"),
  // RAGEN slices history[-k:], so k = 0 would silently mean "everything".
  "agent_proxy.max_context_window": int(-1, -1, "history entries shown in windowed modes (-1: all)", {
    except: [0],
  }),
  "agent_proxy.use_turn_scores": bool(false, "score = Σ turn rewards, no penalty or normalisation"),
  "agent_proxy.reward_normalization.grouping": choice(
    NORMALIZATION_GROUPINGS,
    "state",
    "which episodes are normalised together",
  ),
  "agent_proxy.reward_normalization.method": choice(
    NORMALIZATION_METHODS,
    "identity",
    "how episode scores are normalised",
  ),
  ...under(SAMPLING, R),
  "actor_rollout_ref.rollout.max_model_len": leaf<number | "auto">(
    Type.Union(
      [integer(1), Type.Literal("auto")],
      doc(
        "auto",
        "prompt + max_tokens limit in tokens; auto = the engine's own, asked at start-up and after a replica's outage or a refusal for length; a number is capped by the engine's own (RAGEN's base.yaml says 3600)",
      ),
    ),
  ),
  "actor_rollout_ref.rollout.val_kwargs.do_sample": bool(true, "validation samples (false: greedy)"),
  ...valOf("temperature"),
  ...valOf("top_p"),
  ...valOf("top_k"),
  ...settingsAt(FILTER, {
    value: {
      "actor_rollout_ref.rollout.rollout_filter_value": orNull<number>(
        bare(FILTER.value),
        FILTER.value.default,
        `${FILTER.value.description}; null: the legacy rollout_filter_ratio`,
      ),
      // RAGEN's code falls back to 0.25 when rollout_filter_value is absent.
      "actor_rollout_ref.rollout.rollout_filter_ratio": num(
        { minimum: 0 },
        0.25,
        "RAGEN's legacy filter value, used when rollout_filter_value is null",
      ),
    },
  }),
  "actor_rollout_ref.rollout.gradient_analysis_num_buckets": int(1, 6, "gradient-analysis buckets"),
  "actor_rollout_ref.rollout.gradient_analysis_bucket_mode": choice(
    BUCKET_MODES,
    "quantile",
    "how gradient-analysis buckets split the groups",
  ),
  "rollgym.mode": choice(MODES, "train", "which es_manager section a rollout plays"),
  "rollgym.llm.base_url": leaf<string[] | null>(
    Type.Union(
      [
        Type.Refine(
          Type.Array(Type.String(), { minItems: 1 }),
          (list) => list.every(isHttpUrl) && new Set(list).size === list.length,
          () => "must be distinct http(s) URLs",
        ),
        Type.Null(),
      ],
      {
        ...doc(
          null,
          "the OpenAI-compatible endpoints (…/v1), one per engine replica; null = the built-in policy",
        ),
        "x-allowed": "an http(s) URL, a comma-separated list or a list of them, or null",
        "x-coerce": "comma",
      },
    ),
  ),
  "rollgym.llm.api_key": orNull<string>(nonEmpty(), null, "the endpoints' API key; null = $OPENAI_API_KEY"),
  "rollgym.llm.model": orNull<string>(nonEmpty(), null, "the served model"),
  "rollgym.llm.concurrency": int(1, 256, "requests in flight per replica (vLLM batches 256–1024 sequences)"),
  "rollgym.llm.timeout_s": num(
    { exclusiveMinimum: 0, maximum: 86_400 },
    120,
    "timeout of one request, in seconds",
  ),
  "rollgym.llm.retry_budget_s": num(
    { exclusiveMinimum: 0, maximum: 86_400 },
    300,
    "wall time one turn may spend on retries and on waiting for a replica to come back (rides out an engine restart)",
  ),
  "rollgym.llm.max_retries": orNull<number>(
    integer(0),
    null,
    "optional cap on retries per turn on top of the time budget; null = none",
  ),
  ...under(SAMPLING, "rollgym.llm"),
  "rollgym.llm.extra_body": data(
    "a mapping merged into every request body last (e.g. chat_template_kwargs); fields that change the rendering go to the count requests too; fields rollgym sets itself are refused at start with the key that sets them",
  ),
  "rollgym.llm.grammar": orNull<string>(
    nonEmpty(),
    null,
    "a GBNF file; sent as llama.cpp's grammar or vLLM's structured_outputs.grammar",
  ),
  "rollgym.llm.dialect": choice(
    ["auto", "vllm", "llamacpp"],
    "auto",
    "the engine's request dialect; auto = told apart once at start-up (llama.cpp answers GET /props)",
  ),
  "rollgym.llm.min_response_tokens": int(
    1,
    32,
    "max_tokens is lowered to the room left in the context window, never below this (else the episode ends context_full)",
  ),
  "rollgym.llm.prefill": choice(
    ["continue", "none"],
    "continue",
    "continue: the generation prompt's `<think>` goes as an assistant prefill the engine continues (vLLM's continue_final_message); none: no prefill",
  ),
  "rollgym.llm.count_tokens": choice(
    ["engine", "usage"],
    "engine",
    "engine: prompts are counted by the engine (vLLM's /tokenize, llama.cpp's input_tokens); usage: no count requests (a gateway that forwards only /v1/*), prompts fitted on upper bounds; chat mode only",
  ),
  "rollgym.llm.request_seeds": bool(
    true,
    "send each request's seed, derived from (batch seed, env id, turn), so a deterministic engine replays a batch; false sends seed: null (vLLM's faster batched sampling, no replay)",
  ),
  "rollgym.llm.cache_salt": choice(
    ["version", "off"],
    "version",
    "version: once a trainer has named a weight version, vLLM requests carry cache_salt = its label, so KV cached under old weights is never reused for new ones (llama.cpp has no salt); off: no cache_salt",
  ),
  "rollgym.llm.pause_clear_cache": bool(
    false,
    "vLLM's clear_cache, sent with every POST /pause of a weight update: false keeps the KV cache, so a keep pause's frozen requests go on after /resume from KV the old weights computed (no recompute); true drops the KV and prefix caches, so they are prefilled again under the new weights (about prompt + tokens so far per frozen request)",
  ),
  "rollgym.context.truncation": choice(
    ["turns", "ragen"],
    "turns",
    "turns: drop the oldest complete turns; ragen: RAGEN's _apply_max_length",
  ),
  "rollgym.policy.name": choice(POLICY_NAMES, "oracle", "the built-in policy when no endpoint is set"),
  "rollgym.policy.noise": num(
    { minimum: 0, maximum: 1 },
    0,
    "probability that an answer is random valid actions (built-in policies)",
  ),
  "rollgym.policy.malformed": num(
    { minimum: 0, maximum: 1 },
    0,
    "probability that an answer breaks the format (built-in policies)",
  ),
  "rollgym.step": int(
    0,
    0,
    "train rollouts RAGEN would already have done: seed = seed.train + step × env_groups",
  ),
  "rollgym.seed": orNull<number>(seed(), null, "explicit batch seed of group 0; overrides the schedule"),
  "rollgym.tokens": bool(
    false,
    "token in, token out: episodes keep their exact token logs (remote engines only)",
  ),
  ...settingsAt(ASYNC),
  "rollgym.binary_reward": bool(
    false,
    "episode reward = 1 if solved else 0 (old RAGEN's training.binary_reward)",
  ),
  "rollgym.max_obs_length": orNull<number>(
    integer(1),
    null,
    "old RAGEN's training.max_obs_length, accepted for old command lines; no effect (a notice says so)",
  ),
  "rollgym.plugins": leaf<string[]>(
    Type.Array(nonEmpty(), {
      ...doc(
        [],
        "modules whose register(registry) adds env types and tags: package names, or paths (in a config file from the file's directory; in key=value from the current directory)",
      ),
      "x-allowed": "a list of non-empty strings",
      "x-coerce": "one",
    }),
  ),
  ...under(LIMITS, "rollgym.limits"),
  "rollgym.limits.group_concurrency": int(
    1,
    64,
    "groups of one rollout rollgym serve plays at once (--group-concurrency); episodes in flight per rollout = this × group_size",
  ),
  ...under(LIMITS, "rollgym.server"),
};

/** Fields of a custom_envs.<Tag> entry, all optional: overlaid on the env registry's entry for the tag. */
export const CUSTOM_ENV_KEYS = {
  env_type: leaf<string>(nonEmpty(doc("", "the env type the tag plays"))),
  max_actions_per_traj: int(1, 1, "actions per episode"),
  env_instruction: leaf<string>(Type.String(doc("", "the instruction the prompt opens with"))),
  max_tokens: int(1, 1, "RAGEN's per-env response budget"),
  parallel_friendly: bool(false, "RAGEN's worker hint"),
  max_workers: int(1, 1, "RAGEN's worker count"),
  env_config: data("the env type's options, deep-merged across sources (null: the env's defaults)"),
};

/** Old RAGEN's validation keys, translated by load.ts into es_manager.val.env_groups. */
export const OLD_VAL_KEYS = {
  "training.val_data_num": orNull<number>(
    integer(1),
    50,
    "val seeds, a fixed sample of the test set (null: the whole 500-row set)",
  ),
  "training.val_batch_size": int(1, 10, "val seeds per batch; old RAGEN dropped the last partial batch"),
};

/** True when a key's value is a free-form mapping (merged key by key like the rest of the config). */
export function holdsMapping(schema: TSchema): boolean {
  const node = schema as { type?: unknown; anyOf?: TSchema[] };
  return node.type === "object" || (node.anyOf ?? []).some(holdsMapping);
}
