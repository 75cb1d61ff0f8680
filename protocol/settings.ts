// The settings a rollout is made of, written once: sampling, RAGEN's group filter and the episode
// settings, each field with its range, default, description and the configuration key (RAGEN's
// name) that sets it on a server. From these tables come the wire schemas (messages.ts), the
// configuration keys and their defaults (src/config/schema.ts), the request bodies sent to the
// engines (src/llm/generation.ts) and the key table of docs/configuration.md.
//
// Adding a sampling field is one entry in SAMPLING (plus the engine's spelling in
// src/llm/generation.ts when it differs); `node src/config/docs.ts --write` and
// `node protocol/schema-json.ts > protocol/schema.json` regenerate the docs.
import { type Static, type TOptional, type TSchema, Type } from "typebox";

/** Seeds are uint32 (RAGEN seeds numpy's RNG with them). */
export const MAX_SEED = 2 ** 32 - 1;
/** Per-tag `groups` (rollout) and `groups` (env_open); also the filter's largest value. */
export const MAX_GROUPS = 100_000;
export const MAX_TURNS = 1000;
export const MAX_ACTIONS_PER_TURN = 1000;
export const MAX_TEMPERATURE = 100;
export const MAX_TOP_K = 1_000_000;
export const MAX_TOKENS = 1_000_000;
/** vLLM clamps a logit bias to ±100 (ChatCompletionRequest.to_sampling_params); llama.cpp takes any. */
const MAX_LOGIT_BIAS = 100;

export const MODES = ["train", "val"] as const;
export type Mode = (typeof MODES)[number];
export const FILTER_STRATEGIES = ["top_p", "top_k", "top_k_abs", "min_p"] as const;
export type FilterStrategy = (typeof FILTER_STRATEGIES)[number];
export const TOP_P_MODES = ["linear", "softmax"] as const;
export type TopPMode = (typeof TOP_P_MODES)[number];
export const FILTER_TYPES = ["largest", "smallest"] as const;
export type FilterType = (typeof FILTER_TYPES)[number];
export const FILTER_METRICS = ["reward_variance", "reward", "reward_sum"] as const;
export type FilterMetric = (typeof FILTER_METRICS)[number];
export const BUCKET_MODES = ["quantile", "fixed_rv"] as const;
export type BucketMode = (typeof BUCKET_MODES)[number];
export const CONTEXT_WINDOW_MODES = ["full", "limited_multi_turn", "single_turn"] as const;
export type ContextWindowMode = (typeof CONTEXT_WINDOW_MODES)[number];
export const NORMALIZATION_GROUPINGS = ["state", "inductive", "batch"] as const;
export type NormalizationGrouping = (typeof NORMALIZATION_GROUPINGS)[number];
export const NORMALIZATION_METHODS = ["identity", "mean", "mean_std", "asym_clip"] as const;
export type NormalizationMethod = (typeof NORMALIZATION_METHODS)[number];
/** vLLM's POST /pause modes (facts/async-rl.md §1.3), the first rollgym's default. */
export const PAUSE_MODES = ["keep", "wait", "abort"] as const;
export type PauseMode = (typeof PAUSE_MODES)[number];
/**
 * The largest weight-version ordinal (2³¹−1): token mode's token_versions_i32 carries ordinals
 * as int32. end_update past it is refused, and begin_update once the ordinal has reached it.
 */
export const MAX_VERSION_ORDINAL = 2 ** 31 - 1;

/**
 * Where a setting lives in the configuration: `key` (RAGEN's name) with the schema's default;
 * `val`, when validation reads another key (RAGEN's val_kwargs), with that key's default.
 * `aliases` are other spellings RAGEN accepts for a value (e.g. reward_std for reward_variance).
 */
interface SettingMeta<Key extends string = string> {
  key: Key;
  val?: { key: string; default: unknown };
  aliases?: Readonly<Record<string, string>>;
}

export type Setting<T extends TSchema = TSchema, Key extends string = string> = T & {
  default: Static<T>;
  description: string;
  "x-config": SettingMeta<Key>;
};

/** A field with its default, description and configuration key, annotated on the schema itself. */
function setting<T extends TSchema, const Key extends string>(
  schema: T,
  value: Static<T>,
  description: string,
  meta: SettingMeta<Key>,
): Setting<T, Key> {
  return { ...schema, default: value, description, "x-config": meta } as Setting<T, Key>;
}

const enumOf = <const Values extends readonly string[]>(values: Values) =>
  Type.Unsafe<Values[number]>(Type.Enum([...values]));

const R = "actor_rollout_ref.rollout";

/** Sampling of one request, by wire name (= vLLM's request field). */
export const SAMPLING = {
  temperature: setting(Type.Number({ minimum: 0, maximum: MAX_TEMPERATURE }), 1, "sampling temperature", {
    key: `${R}.temperature`,
    val: { key: `${R}.val_kwargs.temperature`, default: 0.5 },
  }),
  top_p: setting(Type.Number({ exclusiveMinimum: 0, maximum: 1 }), 1.0, "nucleus sampling", {
    key: `${R}.top_p`,
    val: { key: `${R}.val_kwargs.top_p`, default: 1.0 },
  }),
  top_k: setting(Type.Integer({ minimum: -1, maximum: MAX_TOP_K }), -1, "top-k sampling (-1 off)", {
    key: `${R}.top_k`,
    val: { key: `${R}.val_kwargs.top_k`, default: -1 },
  }),
  min_p: setting(Type.Number({ minimum: 0, maximum: 1 }), 0, "min-p sampling", { key: `${R}.min_p` }),
  max_tokens: setting(
    Type.Integer({ minimum: 1, maximum: MAX_TOKENS }),
    400,
    "tokens per response (lowered per turn to fit the context window)",
    { key: `${R}.response_length` },
  ),
  // vLLM's ranges (SamplingParams._verify_args). Sent explicitly, so a server's
  // --generation-config defaults never change the policy (RAGEN samples with 1, 0, 0).
  repetition_penalty: setting(
    Type.Number({ exclusiveMinimum: 0, maximum: 100 }),
    1,
    "repetition penalty, sent with every request (llama.cpp: repeat_penalty)",
    { key: "rollgym.llm.repetition_penalty" },
  ),
  presence_penalty: setting(
    Type.Number({ minimum: -2, maximum: 2 }),
    0,
    "presence penalty, sent with every request",
    { key: "rollgym.llm.presence_penalty" },
  ),
  frequency_penalty: setting(
    Type.Number({ minimum: -2, maximum: 2 }),
    0,
    "frequency penalty, sent with every request",
    { key: "rollgym.llm.frequency_penalty" },
  ),
  logit_bias: setting(
    Type.Union(
      [
        // A msgpack map (not a bin, whose bytes would read as ids 0…n), keys token ids in decimal.
        Type.Refine(
          Type.Record(
            Type.String({ pattern: "^(0|[1-9][0-9]{0,9})$" }),
            Type.Number({ minimum: -MAX_LOGIT_BIAS, maximum: MAX_LOGIT_BIAS }),
            { additionalProperties: false },
          ),
          (value) => [Object.prototype, null].includes(Object.getPrototypeOf(value)),
          () => "must be a map",
        ),
        Type.Null(),
      ],
      {
        "x-allowed": `a mapping of token ids to biases from -${MAX_LOGIT_BIAS} to ${MAX_LOGIT_BIAS}, or null`,
      },
    ),
    null,
    "added to the logits of the given token ids before sampling (token id → bias; -100 bans, 100 forces); null: none",
    { key: "rollgym.llm.logit_bias" },
  ),
} as const;
export type SamplingField = keyof typeof SAMPLING;
/** The fields whose value may be null: null means "none", and such a field is left out of requests. */
type NullableField<Table extends Record<string, TSchema>> = {
  [F in keyof Table]: null extends Static<Table[F]> ? F : never;
}[keyof Table];
/**
 * Every sampling field, resolved (the server's configured values fill what a request omits); a
 * field whose setting is null is absent.
 */
export type SamplingValues = {
  -readonly [F in Exclude<SamplingField, NullableField<typeof SAMPLING>>]: Static<(typeof SAMPLING)[F]>;
} & {
  -readonly [F in NullableField<typeof SAMPLING>]?: NonNullable<Static<(typeof SAMPLING)[F]>>;
};

/** RAGEN's group filter (`actor_rollout_ref.rollout.rollout_filter_*`), by wire name. */
export const FILTER = {
  strategy: setting(enumOf(FILTER_STRATEGIES), "top_p", "which groups the filter keeps", {
    key: `${R}.rollout_filter_strategy`,
  }),
  value: setting(
    Type.Number({ minimum: 0, maximum: MAX_GROUPS }),
    1.0,
    "the strategy's threshold: mass for top_p, fraction for top_k, count for top_k_abs, ratio for min_p",
    { key: `${R}.rollout_filter_value` },
  ),
  top_p_mode: setting(enumOf(TOP_P_MODES), "linear", "how top_p turns scores into probabilities", {
    key: `${R}.rollout_filter_top_p_prob_mode`,
  }),
  type: setting(enumOf(FILTER_TYPES), "largest", "keep the groups with the largest or smallest scores", {
    key: `${R}.rollout_filter_type`,
  }),
  include_zero: setting(Type.Boolean(), true, "false: groups scoring 0 are dropped before selection", {
    key: `${R}.rollout_filter_include_zero`,
  }),
  metric: setting(enumOf(FILTER_METRICS), "reward_variance", "the group score the filter ranks", {
    key: `${R}.rollout_filter_metric`,
    // RAGEN lower-cases the metric and maps reward_std to reward_variance (build_rollout_filter).
    aliases: { reward_std: "reward_variance" },
  }),
  // Configuration only: no wire field carries it (WIRE_FILTER below leaves it out).
  selection_eps: setting(Type.Number({ minimum: 0 }), 0.01, "linear top_p's epsilon", {
    key: `${R}.rollout_filter_selection_eps`,
  }),
} as const;

/** The filter fields a rollout request may carry: all but the configuration-only ones. */
const { selection_eps: _configOnly, ...wireFilter } = FILTER;
export const WIRE_FILTER = wireFilter;

/** Episode settings a rollout request may override, by wire name. */
export const EPISODE = {
  max_turn: setting(Type.Integer({ minimum: 1, maximum: MAX_TURNS }), 5, "model turns per episode", {
    key: "agent_proxy.max_turn",
  }),
  max_actions_per_turn: setting(
    Type.Integer({ minimum: 1, maximum: MAX_ACTIONS_PER_TURN }),
    2,
    "actions kept per turn",
    { key: "agent_proxy.max_actions_per_turn" },
  ),
  think: setting(Type.Boolean(), true, "`<think>…</think><answer>…</answer>` (false: `<answer>` only)", {
    key: "agent_proxy.enable_think",
  }),
} as const;

const StreamGroups = Type.Integer({ minimum: 1, maximum: MAX_GROUPS });
const Versions = Type.Integer({ minimum: 0, maximum: MAX_GROUPS });

/**
 * Asynchronous RL (issue #22): how a stream rollout paces itself against the trainer's weight
 * versions, by wire name. Configured under `rollgym.async.*` (null: off, or the rollout's own
 * groups); a rollout request may set each (WIRE_ASYNC: a number, never null).
 */
export const ASYNC = {
  max_staleness: setting(
    Type.Union([Versions, Type.Null()]),
    null,
    "stream rollouts: a group starts only while accepted + running groups <= (max_staleness + v + 1) x groups_per_step, v = version ordinals gained since the rollout began (0 = synchronous); null: no bound",
    { key: "rollgym.async.max_staleness" },
  ),
  groups_per_step: setting(
    Type.Union([StreamGroups, Type.Null()]),
    null,
    "groups the trainer consumes per weight update, for max_staleness; null: the rollout's groups (its tags' groups summed)",
    { key: "rollgym.async.groups_per_step" },
  ),
  drop_older_than: setting(
    Type.Union([Versions, Type.Null()]),
    null,
    "stream rollouts: a finished group whose oldest turn is more than this many versions old is dropped, not sent (counted in rollgym_stale_groups_dropped_total); null: never",
    { key: "rollgym.async.drop_older_than" },
  ),
  in_flight: setting(
    Type.Union([StreamGroups, Type.Null()]),
    null,
    "stream rollouts: groups kept running at once; null: the rollout's groups (one window of an endless stream)",
    { key: "rollgym.async.in_flight" },
  ),
} as const;

/** The async fields a rollout request may carry (omitted: the configured value). */
export const WIRE_ASYNC = {
  max_staleness: Type.Optional(Versions),
  groups_per_step: Type.Optional(StreamGroups),
  drop_older_than: Type.Optional(Versions),
  in_flight: Type.Optional(StreamGroups),
};

/** Each field of a table as optional (omitted: the server's configured value), for a wire map. */
export function optionalFields<Table extends Record<string, TSchema>>(
  table: Table,
): { [F in keyof Table]: TOptional<Table[F]> } {
  return Object.fromEntries(Object.entries(table).map(([name, schema]) => [name, Type.Optional(schema)])) as {
    [F in keyof Table]: TOptional<Table[F]>;
  };
}
