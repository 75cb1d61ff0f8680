// The settings a rollout is made of, written once: sampling, RAGEN's group filter and the episode
// settings, each field with its range, default, description and the configuration key (RAGEN's
// name) that sets it on a server. From these tables come the wire schemas (messages.ts), the
// configuration keys and their defaults (src/config/schema.ts), the request bodies sent to the
// engines (src/llm/generation.ts) and the key table of docs/configuration.md.
//
// Inside the code a setting keeps its wire name, and its type is the table's (SettingValues), so
// adding a setting is one entry in its table: a sampling field in SAMPLING (plus the engine's
// spelling in src/llm/generation.ts when it differs), a filter, episode or async field in FILTER,
// EPISODE or ASYNC (src/rollout/request.ts resolves them, config and frame alike), a limit in
// LIMIT_ENTRIES. `node src/config/docs.ts --write` and
// `node protocol/schema-json.ts > protocol/schema.json` regenerate the docs.
import {
  type Static,
  type TInteger,
  type TNull,
  type TNumber,
  type TOptional,
  type TSchema,
  type TUnion,
  Type,
} from "typebox";
import { isPlainObject } from "./plain-object.ts";
import { MAX_SEED } from "./seeds.ts";

export { MAX_SEED };
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
 * Who pauses the engines in a weight update: "pause", this server (the default), or
 * "held_elsewhere", another server sharing them (a shard follower): this one only closes its
 * admission and moves its version, and sends no engine request (docs/ray.md "Weight updates").
 */
export const UPDATE_ENGINES = ["pause", "held_elsewhere"] as const;
export type UpdateEngines = (typeof UPDATE_ENGINES)[number];
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
export interface SettingMeta<Key extends string = string> {
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
          isPlainObject,
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
/** A table's settings by wire name, each of its schema's type: how the code holds them. */
export type SettingValues<Table extends Record<string, TSchema>> = {
  -readonly [F in keyof Table]: Static<Table[F]>;
};
/** Each setting's default, by wire name. */
export function defaultsOf<Table extends Record<string, Setting>>(table: Table): SettingValues<Table> {
  return Object.fromEntries(
    Object.entries(table).map(([name, setting]) => [name, structuredClone(setting.default)]),
  ) as SettingValues<Table>;
}
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
export type FilterValues = SettingValues<typeof FILTER>;

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
export type EpisodeValues = SettingValues<typeof EPISODE>;

const StreamGroups = Type.Integer({ minimum: 1, maximum: MAX_GROUPS });
const Versions = Type.Integer({ minimum: 0, maximum: MAX_GROUPS });

/**
 * Asynchronous RL (issue #22): how a stream rollout paces itself against the trainer's weight
 * versions, by wire name. Configured under `rollgym.async.*` (null: off, or the rollout's own
 * groups); a rollout request may set each (WIRE_ASYNC: a number or a boolean, never null).
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
  strict_staleness: setting(
    Type.Boolean(),
    false,
    "stream rollouts with max_staleness: no group is trained more than max_staleness versions old by a trainer that takes groups_per_step groups per update in arrival order; a finished group waits while one admitted earlier still plays and needs an earlier step (nothing is discarded; the trainer may wait for a long group); false: max_staleness bounds admission only, and an overtaken group can be older",
    { key: "rollgym.async.strict_staleness" },
  ),
} as const;

/** The async settings whose null means the rollout's own groups (its tags' groups summed); null is off for the rest. */
export const GROUPS_WHEN_NULL = ["groups_per_step", "in_flight"] as const;
type GroupsWhenNull = (typeof GROUPS_WHEN_NULL)[number];
/** ASYNC's settings as a stream rollout runs with them, by wire name: null resolved where it means the rollout's groups. */
export type PaceValues = Omit<SettingValues<typeof ASYNC>, GroupsWhenNull> & {
  [F in GroupsWhenNull]: number;
};

/** A schema without its null member: what a request sends, which is never null. */
type NonNull<T extends TSchema> = T extends TUnion<[infer Member extends TSchema, TNull]> ? Member : T;

/** The async fields a rollout request may carry (omitted: the configured value; never null). */
export const WIRE_ASYNC = Object.fromEntries(
  Object.entries(ASYNC).map(([name, setting]) => {
    const members: TSchema[] = "anyOf" in setting ? setting.anyOf : [setting];
    const sent = members.filter((member) => (member as { type?: unknown }).type !== "null");
    return [name, Type.Optional(sent.length === 1 ? sent[0] : setting)];
  }),
) as { [F in keyof typeof ASYNC]: TOptional<NonNull<(typeof ASYNC)[F]>> };

/** Each field of a table as optional (omitted: the server's configured value), for a wire map. */
export function optionalFields<Table extends Record<string, TSchema>>(
  table: Table,
): { [F in keyof Table]: TOptional<Table[F]> } {
  return Object.fromEntries(Object.entries(table).map(([name, schema]) => [name, Type.Optional(schema)])) as {
    [F in keyof Table]: TOptional<Table[F]>;
  };
}

/** Where a limit takes effect: the option object of buildServer it fills (server: the top level). */
export type LimitPart = "server" | "connections" | "watch" | "openenv" | "files";

/**
 * What a limit is besides a setting: its unit (a value in seconds has a wire name ending in
 * `_s`; inside the server it is kept in milliseconds), which option object it fills, whether and
 * how `welcome.limits` sends it ("required" since version 1, "optional" added later in version 1,
 * "trainer" to trainer sessions only, null not sent), the deprecated wire name sent with the
 * same value (`alias`), a limit whose value caps this one's on the wire (`atMost`), and its
 * camelCase option name when it is not the wire name's (`option`; `_s` becomes `Ms`).
 */
export interface LimitMeta {
  unit: "bytes" | "s" | "count";
  part: LimitPart;
  welcome: "required" | "optional" | "trainer" | null;
  option?: string;
  alias?: string;
  atMost?: string;
  /** The configuration key when it is not `rollgym.server.<wire name>`. */
  key?: string;
}

type Limit<T extends TSchema, M extends LimitMeta> = T & {
  default: Static<T>;
  description: string;
  "x-limit": M;
};

function limit<T extends TSchema, const M extends LimitMeta>(
  schema: T,
  value: Static<T>,
  description: string,
  meta: M,
): Limit<T, M> {
  return { ...schema, default: value, description, "x-limit": meta } as Limit<T, M>;
}

const DAY_S = 86_400;
const MAX_LIMIT_COUNT = 1_000_000;
const MAX_LIMIT_BYTES = 2 ** 40;
const count = <const M extends LimitMeta>(
  value: number,
  description: string,
  meta: M,
  max = MAX_LIMIT_COUNT,
) => limit(Type.Integer({ minimum: 1, maximum: max }), value, description, meta);
const bytes = <const M extends LimitMeta>(value: number, description: string, meta: M) =>
  limit(Type.Integer({ minimum: 1, maximum: MAX_LIMIT_BYTES }), value, description, meta);
/** Seconds, from just above 0 (or from 0 when `zero` is allowed) to a day. */
const seconds = <const M extends LimitMeta>(value: number, description: string, meta: M, zero = false) =>
  limit(
    Type.Number({ ...(zero ? { minimum: 0 } : { exclusiveMinimum: 0 }), maximum: DAY_S }),
    value,
    description,
    meta,
  );

const server = { unit: "count", part: "server", welcome: "optional" } as const;
const serverBytes = { ...server, unit: "bytes" } as const;
const serverSeconds = { ...server, unit: "s" } as const;
const connections = { unit: "count", part: "connections", welcome: "optional" } as const;
const connectionSeconds = { ...connections, unit: "s" } as const;
const files = { unit: "count", part: "files", welcome: null } as const;
const fileBytes = { ...files, unit: "bytes" } as const;

/**
 * Every limit of `rollgym serve`, by wire name, in the order `welcome.limits` sends them (its
 * frames are compared byte for byte): the defaults of buildServer's options, the configuration
 * keys (`rollgym.server.<name>`) that `serve key=value` and config files set, the wire schema of
 * `welcome.limits` (messages.ts) and the limits table of docs/server.md all come from here.
 * Adding a limit is one entry here, then reading its option where it is enforced.
 */
const LIMIT_ENTRIES = {
  max_frame_bytes: bytes(1 << 20, "a client frame; larger: close 1009", {
    ...serverBytes,
    welcome: "required",
  }),
  max_rollouts_per_connection: count(16, "running rollouts of one session; the next `rollout` gets `limit`", {
    ...server,
    welcome: "required",
  }),
  // Checked by `rollgym rollout` too, so their keys stay under rollgym.limits.
  max_groups_per_rollout: count(
    4096,
    "groups of one rollout; rollgym rollout and the server both refuse more (`limit`) before any work",
    { ...server, welcome: "required", key: "rollgym.limits.max_groups_per_rollout" },
    Number.MAX_SAFE_INTEGER,
  ),
  max_episodes_in_flight: count(
    65_536,
    "episodes held at once: by one CLI rollout, or over the whole server (running rollouts, groups awaiting acknowledgement, env sessions); a `rollout` or `env_open` that would pass it gets `limit` (a stream rollout: when not even one group fits)",
    { ...server, welcome: "required", key: "rollgym.limits.max_episodes_in_flight" },
    Number.MAX_SAFE_INTEGER,
  ),
  max_episodes_per_connection: count(
    16_384,
    "episodes held by one session: its share of max_episodes_in_flight; a `rollout` or `env_open` that would pass it gets `limit`",
    server,
  ),
  max_buffered_groups: count(
    64,
    "finished groups one stream rollout holds for a slow client before it pauses (--max-buffered-groups)",
    { ...server, welcome: "required" },
  ),
  max_unacked_groups: count(
    4096,
    "unacknowledged groups (queued or sent) a session holds; while it holds this many, a new `rollout` gets `limit` (running rollouts go on)",
    server,
  ),
  max_env_sessions_per_connection: count(
    16,
    "env sessions open on one connection; the next `env_open` gets `limit`",
    server,
  ),
  max_held_bytes: limit(
    Type.Union([Type.Integer({ minimum: 1, maximum: MAX_LIMIT_BYTES }), Type.Null()]),
    null,
    "the memory budget: bytes held over the whole server by rollouts in flight, groups held for acknowledgement and env sessions, charged as measured; a request that would pass it gets `limit`, a rollout whose turns pass it is cancelled; default (null): 512 MiB, or an eighth of V8's heap limit when smaller. Also sent as `max_env_bytes`, its earlier name",
    { ...serverBytes, alias: "max_env_bytes" },
  ),
  max_held_bytes_per_connection: bytes(
    128 << 20,
    "bytes one session holds: its share of max_held_bytes (sent as at most that); a request that would pass it gets `limit`, a rollout whose turns pass it is cancelled. Also sent as `max_env_bytes_per_connection`, its earlier name",
    { ...serverBytes, alias: "max_env_bytes_per_connection", atMost: "max_held_bytes" },
  ),
  env_idle_s: seconds(
    600,
    'an env session that takes no `env_step` for this long is closed and its episodes and bytes released (`error {code: "limit", field: "env_idle_s"}`)',
    serverSeconds,
  ),
  send_pause_bytes: bytes(
    8 << 20,
    "bytes buffered for a client above which the server stops reading from it",
    serverBytes,
  ),
  max_send_buffer_bytes: bytes(
    64 << 20,
    "bytes buffered for a client above which it is closed with 4008",
    serverBytes,
  ),
  send_stall_s: seconds(
    60,
    "seconds a client may stay paused (its replies unread) before it is closed with 4008",
    serverSeconds,
  ),
  resume_grace_s: seconds(
    60,
    "seconds a dropped session (and its rollouts) waits for the client to resume (--resume-grace)",
    { ...serverSeconds, welcome: "required" },
    true,
  ),
  max_connections: count(
    1024,
    "WebSocket connections open at once, server-wide; past it the upgrade gets HTTP 503 (--max-connections)",
    connections,
  ),
  max_connections_per_address: count(
    256,
    "WebSocket connections open at once from one remote address; past it HTTP 503 (--max-connections-per-address)",
    connections,
  ),
  hello_timeout_s: seconds(
    10,
    "a WebSocket that has not sent a valid `hello` by then is closed with 4010",
    connectionSeconds,
  ),
  idle_drop_s: seconds(
    60,
    "at max_connections, a connection that has done no work for this long and holds nothing is closed with 4011 to make room for a new one",
    connectionSeconds,
    true,
  ),
  heartbeat_s: seconds(
    30,
    "the server pings every WebSocket this often; one that has not answered the previous ping is dropped",
    connectionSeconds,
  ),
  max_watchers: count(32, "watch subscriptions open at once over the whole server", {
    unit: "count",
    part: "watch",
    welcome: "optional",
  }),
  // Not sent (named in its `limit` error): welcome's bytes stay as they were.
  max_watchers_per_address: count(8, "watch subscriptions open at once from one remote address", {
    unit: "count",
    part: "watch",
    welcome: null,
  }),
  watch_idle_s: seconds(
    60,
    "at max_watchers (or max_watchers_per_address), a new `watch` ends the subscription whose connection has done no work for the longest, if that is at least this long",
    { unit: "s", part: "watch", welcome: "optional", option: "idleMs" },
  ),
  max_update_s: limit(
    Type.Number({ minimum: 1, maximum: DAY_S }),
    600,
    "seconds a weight update may stay open from its `begin_update`; then the engines resume at the old version (--max-update)",
    { ...serverSeconds, welcome: "trainer" },
  ),
  max_watch_buffer_bytes: bytes(
    4 << 20,
    "bytes a watcher's socket may buffer; past it the watcher loses frames and gets `watch_gap` (sent in `watching`)",
    { unit: "bytes", part: "watch", welcome: null, option: "maxBufferBytes" },
  ),
  max_pending_connections: count(
    512,
    "connections not past their handshake (HTTP without a complete request, WebSockets without `hello`); one more drops the oldest",
    { ...connections, welcome: null },
  ),
  headers_timeout_s: seconds(10, "time a client has to send a request's headers; then HTTP 408", {
    ...connectionSeconds,
    welcome: null,
  }),
  request_timeout_s: seconds(60, "time a client has to send a whole HTTP request, body (uploads) included", {
    ...connectionSeconds,
    welcome: null,
  }),
  keep_alive_timeout_s: seconds(5, "an idle keep-alive HTTP connection is closed after this", {
    ...connectionSeconds,
    welcome: null,
  }),
  max_openenv_sessions: count(
    1024,
    "OpenEnv sessions (/openenv/TAG/ws) open at once over all tags; past it CAPACITY_REACHED",
    { unit: "count", part: "openenv", welcome: null, option: "maxSessions" },
  ),
  max_upload_bytes: bytes(32 << 20, "largest episode-file upload accepted; larger: HTTP 413", fileBytes),
  max_concurrent_uploads: count(
    4,
    "uploads whose bodies are being received at once; one more gets HTTP 503",
    files,
  ),
  max_uploads: count(16, "uploads kept at once; a new one evicts the oldest", files),
  max_upload_total_bytes: bytes(
    64 << 20,
    "bytes of uploads kept at once; a new one evicts the oldest until it fits",
    fileBytes,
  ),
  max_shared_listed: count(500, "files of --share listed (the newest first)", {
    ...files,
    option: "maxListed",
  }),
  max_shared_bytes: bytes(256 << 20, "largest shared file served; larger: HTTP 413", fileBytes),
} as const;

type LimitEntries = typeof LIMIT_ENTRIES;
type LimitKey<W extends string, M> = M extends { key: infer K extends string } ? K : `rollgym.server.${W}`;

/** The limits with their configuration keys (`x-config`), so they stand in the key table like the settings above. */
export const LIMITS = Object.fromEntries(
  Object.entries(LIMIT_ENTRIES).map(([name, entry]) => {
    const meta: LimitMeta = entry["x-limit"];
    return [name, { ...entry, "x-config": { key: meta.key ?? `rollgym.server.${name}` } }];
  }),
) as unknown as {
  [W in keyof LimitEntries & string]: LimitEntries[W] & {
    "x-config": SettingMeta<LimitKey<W, LimitEntries[W]["x-limit"]>>;
  };
};
export type LimitName = keyof typeof LIMITS;

type Camel<S extends string> = S extends `${infer H}_${infer T}` ? `${H}${Capitalize<Camel<T>>}` : S;
type OptionName<W extends string, M> = M extends { option: infer O extends string }
  ? O
  : W extends `${infer B}_s`
    ? `${Camel<B>}Ms`
    : Camel<W>;

/** The option name a limit has inside the server: `option`, else its wire name in camelCase, `_s` → `Ms`. */
export function limitOption(name: LimitName): string {
  const meta: LimitMeta = LIMITS[name]["x-limit"];
  if (meta.option) return meta.option;
  const camel = (s: string) => s.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
  return name.endsWith("_s") ? `${camel(name.slice(0, -2))}Ms` : camel(name);
}

/** The limits of one part, by option name (a value in seconds held in milliseconds). */
export type LimitValues<P extends LimitPart> = {
  -readonly [W in LimitName as LimitEntries[W]["x-limit"]["part"] extends P
    ? OptionName<W, LimitEntries[W]["x-limit"]>
    : never]: number;
};

type WireLimit<M> = M extends { unit: "s" } ? TNumber : TInteger;
type Welcomed<W extends LimitName, Kinds> = LimitEntries[W]["x-limit"]["welcome"] extends Kinds ? W : never;
type WelcomeLimitFields = {
  [W in LimitName as Welcomed<W, "required">]: WireLimit<LimitEntries[W]["x-limit"]>;
} & {
  [W in LimitName as Welcomed<W, "optional" | "trainer">]: TOptional<WireLimit<LimitEntries[W]["x-limit"]>>;
} & {
  [W in LimitName as LimitEntries[W]["x-limit"] extends { alias: infer A extends string }
    ? A
    : never]: TOptional<WireLimit<LimitEntries[W]["x-limit"]>>;
};

/**
 * The fields of `welcome.limits` (messages.ts's LimitsSchema): a count or bytes is an integer
 * >= 1, seconds a number >= 0; the limits added later in version 1, the deprecated names and
 * the trainer-only ones are optional.
 */
export function welcomeLimitFields(): WelcomeLimitFields {
  const fields: Record<string, TSchema> = {};
  for (const [name, entry] of Object.entries(LIMITS)) {
    const meta: LimitMeta = entry["x-limit"];
    if (meta.welcome === null) continue;
    const wire = (description: string) =>
      meta.unit === "s"
        ? Type.Number({ minimum: 0, description })
        : Type.Integer({ minimum: 1, description });
    fields[name] =
      meta.welcome === "required" ? wire(entry.description) : Type.Optional(wire(entry.description));
    if (meta.alias)
      fields[meta.alias] = Type.Optional(wire(`the earlier name of ${name}, sent with the same value`));
  }
  return fields as WelcomeLimitFields;
}
