import { type Static, type TProperties, type TSchema, Type } from "typebox";
import { Compile, type Validator } from "typebox/compile";
import { ERROR_CODES } from "./codec.ts";
import { isPlainObject as isMap } from "./plain-object.ts";
import {
  EPISODE,
  MAX_GROUPS,
  MAX_SEED,
  MAX_TOKENS,
  MAX_VERSION_ORDINAL,
  MODES,
  optionalFields,
  PAUSE_MODES,
  SAMPLING,
  UPDATE_ENGINES,
  WIRE_ASYNC,
  WIRE_FILTER,
  welcomeLimitFields,
} from "./settings.ts";
import { PROTOCOL_VERSION } from "./version.ts";

export {
  MAX_ACTIONS_PER_TURN,
  MAX_GROUPS,
  MAX_SEED,
  MAX_TEMPERATURE,
  MAX_TOKENS,
  MAX_TOP_K,
  MAX_TURNS,
  MAX_VERSION_ORDINAL,
} from "./settings.ts";

// ---------------------------------------------------------------------------------------------
// Limits baked into the schemas. Server-configured limits (welcome.limits) are checked by the
// server on top of these; these only keep obviously broken input out.
// ---------------------------------------------------------------------------------------------

export const MAX_ID_LENGTH = 200;
export const MAX_GROUP_SIZE = 4096;
export const MAX_TAGS = 1000;
export const MAX_INT32 = 2 ** 31 - 1;
export const MAX_CREDIT = 1_000_000;
/** hello.trainer_token, and the trainer token a server may be given. */
export const MAX_TRAINER_TOKEN_LENGTH = 200;
/** Items per `ack.groups` and per `env_step.responses`. */
export const MAX_ITEMS = 100_000;

/**
 * A closed map: unknown fields are rejected so typos surface. The refinement matters because
 * TypeBox accepts any non-array object as an object, and msgpack decodes `bin` to Uint8Array and
 * timestamps to Date; only a real msgpack map may stand where a map is expected.
 */
function map<Props extends TProperties>(properties: Props) {
  return Type.Refine(Type.Object(properties, { additionalProperties: false }), isMap, mustBeMap);
}
const mustBeMap = (): string => "must be a msgpack map";

const Id = Type.String({ minLength: 1, maxLength: MAX_ID_LENGTH });
const Seed = Type.Integer({ minimum: 0, maximum: MAX_SEED });
const Step = Type.Integer({ minimum: 0, maximum: MAX_SEED });
const GroupCount = Type.Integer({ minimum: 1, maximum: MAX_GROUPS });
const GroupSize = Type.Integer({ minimum: 1, maximum: MAX_GROUP_SIZE });
const GroupId = Type.Integer({ minimum: 0, maximum: MAX_INT32 });
const EnvId = Type.Integer({ minimum: 0, maximum: MAX_INT32 });
const Count = Type.Integer({ minimum: 0 });

export const ModeSchema = Type.Enum([...MODES]);
export type Mode = Static<typeof ModeSchema>;
export const DeliverySchema = Type.Enum(["batch", "stream"]);
export type Delivery = Static<typeof DeliverySchema>;

/** Any msgpack `bin` (decoded as Uint8Array). */
const Bin = Type.Refine(
  Type.Unsafe<Uint8Array>({ description: "msgpack bin" }),
  (value) => value instanceof Uint8Array,
  () => "must be a msgpack bin (Uint8Array)",
);

// ---------------------------------------------------------------------------------------------
// Client → server
// ---------------------------------------------------------------------------------------------

export const HelloSchema = map({
  type: Type.Literal("hello"),
  // Any integer: a mismatch is answered with `protocol_version`, not `bad_frame`.
  protocol: Type.Integer({ minimum: 0, maximum: MAX_INT32 }),
  client: Type.String({ maxLength: MAX_ID_LENGTH }),
  resume: Type.Optional(Id),
  /** "trainer": the one session that may bracket weight updates (PROTOCOL.md "Weight updates"). */
  role: Type.Optional(Type.Enum(["trainer"])),
  /** With role "trainer", on a server that reserves the role: its trainer token (PROTOCOL.md "Handshake"). */
  trainer_token: Type.Optional(Type.String({ minLength: 1, maxLength: MAX_TRAINER_TOKEN_LENGTH })),
});
export type Hello = Static<typeof HelloSchema>;

/** Sampling (settings.ts); an omitted field takes the server's configured value. */
export const SamplingSchema = map(optionalFields(SAMPLING));
export type Sampling = Static<typeof SamplingSchema>;

/** RAGEN's group filter (settings.ts); an omitted field takes the server's configured value. */
export const FilterSchema = map(optionalFields(WIRE_FILTER));
export type Filter = Static<typeof FilterSchema>;

export const TagRequestSchema = map({ tag: Id, groups: GroupCount });
export type TagRequest = Static<typeof TagRequestSchema>;

/**
 * What a rollout's verdict reads of an episode it did not play (`played_episodes`): its record's
 * fields of these names, as its group frame carried them; a null field may be left out.
 */
export const PlayedEpisodeSchema = map({
  env_id: EnvId,
  group_id: GroupId,
  tag: Type.String(),
  seed: Seed,
  score: Type.Number(),
  success: Type.Boolean(),
  failure: Type.Optional(Type.Union([Type.String(), Type.Null()])),
  end_reason: Type.String(),
  /** RAGEN metric name → value. */
  metrics: Type.Refine(Type.Record(Type.String({ pattern: "^.+$" }), Type.Number()), isMap, mustBeMap),
  /** Per turn, what the context tally counts. */
  turns: Type.Array(
    map({ context_dropped: Type.Optional(Count), ambiguous_split: Type.Optional(Type.Boolean()) }),
    { maxItems: MAX_ITEMS },
  ),
  /** Token mode: the log's drift counts. */
  tokens: Type.Optional(
    map({
      prompt_drift: Count,
      logprobs_missing: Count,
      template_drift: Type.Optional(Type.Union([Count, Type.Null()])),
    }),
  ),
});
export type PlayedEpisode = Static<typeof PlayedEpisodeSchema>;

/** A shard's share of a rollout: groups first .. first + count - 1 (PROTOCOL.md "Shards"). */
export const GroupRangeSchema = map({ first: GroupId, count: GroupCount });
export type GroupRange = Static<typeof GroupRangeSchema>;

export const RolloutRequestSchema = map({
  type: Type.Literal("rollout"),
  id: Id,
  tags: Type.Array(TagRequestSchema, { minItems: 1, maxItems: MAX_TAGS }),
  mode: ModeSchema,
  group_size: GroupSize,
  step: Type.Optional(Step),
  seed: Type.Optional(Seed),
  // Episode settings (settings.ts EPISODE); omitted: the configured value.
  ...optionalFields(EPISODE),
  sampling: Type.Optional(SamplingSchema),
  filter: Type.Optional(FilterSchema),
  delivery: DeliverySchema,
  /** Token in, token out: group frames carry each episode's exact token log. */
  tokens: Type.Optional(Type.Boolean()),
  /**
   * Stream delivery only: the rollout has no end. Its tags' groups make one window; windows
   * follow each other (group k plays seed + k) until `cancel` (PROTOCOL.md "Endless streams").
   */
  endless: Type.Optional(Type.Boolean()),
  /**
   * Stream delivery only: play only these groups of the rollout, numbered, seeded and sampled as
   * the whole rollout plays them; its verdict keeps every group (`played_episodes` gives the
   * whole rollout's).
   */
  group_range: Type.Optional(GroupRangeSchema),
  /**
   * Every episode of the rollout in env-id order, played elsewhere (by shards, `group_range`):
   * the server plays nothing and answers with the rollout's `batch` frame over them, as if it
   * had played them (PROTOCOL.md "Shards").
   */
  played_episodes: Type.Optional(Type.Array(PlayedEpisodeSchema, { maxItems: MAX_ITEMS })),
  // Pacing against the trainer's weight versions (settings.ts ASYNC); omitted: the configured value.
  ...WIRE_ASYNC,
});
export type RolloutRequest = Static<typeof RolloutRequestSchema>;

export const CreditSchema = map({
  type: Type.Literal("credit"),
  groups: Type.Integer({ minimum: 1, maximum: MAX_CREDIT }),
});
export type Credit = Static<typeof CreditSchema>;

export const AckSchema = map({
  type: Type.Literal("ack"),
  rollout: Id,
  groups: Type.Array(GroupId, { maxItems: MAX_ITEMS }),
  batch: Type.Optional(Type.Boolean()),
});
export type Ack = Static<typeof AckSchema>;

export const CancelSchema = map({ type: Type.Literal("cancel"), rollout: Id });
export type Cancel = Static<typeof CancelSchema>;

export const EnvOpenSchema = map({
  type: Type.Literal("env_open"),
  id: Id,
  tag: Id,
  groups: GroupCount,
  group_size: GroupSize,
  seed: Type.Optional(Seed),
  mode: Type.Optional(ModeSchema),
  step: Type.Optional(Step),
  ...optionalFields(EPISODE),
  /** Token mode: replies carry the ids to append; responses must carry their sampled ids. */
  tokens: Type.Optional(Type.Boolean()),
  /**
   * What each env_stepped result's `messages` holds: "new" (default) the messages after the
   * first `keep` of the previous turn's chat, "full" the whole chat for the next turn.
   */
  messages: Type.Optional(Type.Enum(["new", "full"])),
});
export type EnvOpen = Static<typeof EnvOpenSchema>;

export const EnvResponseSchema = map({
  env_id: EnvId,
  text: Type.String(),
  // Token sessions: the exact ids the trainer's engine sampled (and their logprobs).
  sampled_ids: Type.Optional(
    Type.Array(Type.Integer({ minimum: 0, maximum: 2 ** 31 - 1 }), { maxItems: MAX_TOKENS }),
  ),
  logprobs: Type.Optional(Type.Array(Type.Number(), { maxItems: MAX_TOKENS })),
});
export type EnvResponse = Static<typeof EnvResponseSchema>;

export const EnvStepSchema = map({
  type: Type.Literal("env_step"),
  id: Id,
  responses: Type.Array(EnvResponseSchema, { maxItems: MAX_ITEMS }),
});
export type EnvStep = Static<typeof EnvStepSchema>;

export const EnvCloseSchema = map({ type: Type.Literal("env_close"), id: Id });
export type EnvClose = Static<typeof EnvCloseSchema>;

const VersionLabel = Type.String({ minLength: 1, maxLength: MAX_ID_LENGTH });

/** A weight version as the trainer names it: a label and an ordinal that grows with every update. */
export const VersionSchema = map({
  /** What the trainer calls it, e.g. "step-42". */
  label: VersionLabel,
  /** Increases with every update; the staleness rule and ages count in these. */
  ordinal: Type.Integer({ minimum: 0, maximum: MAX_VERSION_ORDINAL }),
});
export type Version = Static<typeof VersionSchema>;

/**
 * The version end_update names (and begin_update may announce). Its ordinal has no maximum here:
 * one past MAX_VERSION_ORDINAL is the update's error (`update`), answered where trainers wait for it.
 */
const NewVersionSchema = map({
  label: VersionLabel,
  ordinal: Type.Integer({
    minimum: 0,
    description: `greater than the current ordinal and at most ${MAX_VERSION_ORDINAL}; otherwise error update (at begin_update no update begins; at end_update the update stays open)`,
  }),
});

export const PauseModeSchema = Type.Enum(PAUSE_MODES);

/** Who pauses the engines: this server ("pause", the default) or another sharing them. */
export const UpdateEnginesSchema = Type.Enum(UPDATE_ENGINES, {
  description:
    '"held_elsewhere": close admission and move the version, but send no engine request (another server pauses and resumes the shared engines)',
});

/**
 * Trainer only: close admission and pause every engine before the trainer moves its weights.
 * `version`, when given, is the one end_update will name: checked here, before any engine pauses.
 */
export const BeginUpdateSchema = map({
  type: Type.Literal("begin_update"),
  id: Id,
  mode: Type.Optional(PauseModeSchema),
  version: Type.Optional(NewVersionSchema),
  engines: Type.Optional(UpdateEnginesSchema),
});
export type BeginUpdate = Static<typeof BeginUpdateSchema>;

/** Trainer only: the new weights are in place as `version`; resume the engines and admission. */
export const EndUpdateSchema = map({
  type: Type.Literal("end_update"),
  id: Id,
  version: NewVersionSchema,
});
export type EndUpdate = Static<typeof EndUpdateSchema>;

/** Read-only subscription to copies of every rollout's groups (PROTOCOL.md "Watch"). */
export const WatchSchema = map({ type: Type.Literal("watch") });
export type Watch = Static<typeof WatchSchema>;

export const UnwatchSchema = map({ type: Type.Literal("unwatch") });
export type Unwatch = Static<typeof UnwatchSchema>;

export const ClientMessageSchema = Type.Union([
  HelloSchema,
  RolloutRequestSchema,
  CreditSchema,
  AckSchema,
  CancelSchema,
  EnvOpenSchema,
  EnvStepSchema,
  EnvCloseSchema,
  WatchSchema,
  UnwatchSchema,
  BeginUpdateSchema,
  EndUpdateSchema,
]);
export type ClientMessage = Static<typeof ClientMessageSchema>;
export type ClientMessageType = ClientMessage["type"];

/** Schema of each client message, by `type`. */
export const CLIENT_MESSAGE_SCHEMAS = {
  hello: HelloSchema,
  rollout: RolloutRequestSchema,
  credit: CreditSchema,
  ack: AckSchema,
  cancel: CancelSchema,
  env_open: EnvOpenSchema,
  env_step: EnvStepSchema,
  env_close: EnvCloseSchema,
  watch: WatchSchema,
  unwatch: UnwatchSchema,
  begin_update: BeginUpdateSchema,
  end_update: EndUpdateSchema,
} as const satisfies Record<ClientMessageType, TSchema>;
export const CLIENT_MESSAGE_TYPES = Object.keys(CLIENT_MESSAGE_SCHEMAS) as ClientMessageType[];

// ---------------------------------------------------------------------------------------------
// Server → client
// ---------------------------------------------------------------------------------------------

/** An episode record (docs/rollouts.md); the wire schema does not pin its fields. */
export const EpisodeSchema = Type.Refine(Type.Record(Type.String(), Type.Unknown()), isMap, mustBeMap);
export type Episode = Static<typeof EpisodeSchema>;

/** RAGEN metric name → value. Values are not range-checked: NaN (e.g. a mean over nothing) is legal. */
export const MetricsSchema = Type.Unsafe<Record<string, number>>(
  Type.Refine(Type.Record(Type.String(), Type.Unknown()), isMap, mustBeMap),
);
export type Metrics = Static<typeof MetricsSchema>;

export const ChatMessageSchema = map({ role: Type.String(), content: Type.String() });
export type ChatMessage = Static<typeof ChatMessageSchema>;

// From the LIMITS table (settings.ts); the fields added later in version 1 are present from
// servers that enforce them (docs/server.md "Limits").
export const LimitsSchema = map(welcomeLimitFields());
export type Limits = Static<typeof LimitsSchema>;

export const WelcomeSchema = map({
  type: Type.Literal("welcome"),
  protocol: Type.Integer({ minimum: 0 }),
  server: Type.String(),
  session: Type.String({ minLength: 1 }),
  resumed: Type.Boolean(),
  envs: Type.Array(Type.String()),
  limits: LimitsSchema,
  /** Trainer sessions only: the weight version in force. */
  version: Type.Optional(VersionSchema),
});
export type Welcome = Static<typeof WelcomeSchema>;

/**
 * The staleness pacing's counts when a group started: the versions gained since the rollout
 * began, the groups accepted and running, and the capacity then (0: no bound).
 */
export const AdmittedSchema = map({ version: Count, accepted: Count, running: Count, capacity: Count });
export type Admitted = Static<typeof AdmittedSchema>;

export const GroupFrameSchema = map({
  type: Type.Literal("group"),
  rollout: Type.String(),
  group: GroupId,
  seq: Type.Integer({ minimum: 1 }),
  tag: Type.String(),
  seed: Seed,
  kept: Type.Union([Type.Boolean(), Type.Null()]),
  score: Type.Union([Type.Number(), Type.Null()]),
  episodes: Type.Array(EpisodeSchema),
  env_ids_i32: Bin,
  scores_f32: Bin,
  rewards_f32: Bin,
  penalties_f32: Bin,
  success_u8: Bin,
  // Token mode only (PROTOCOL.md "Token logs"): the episodes' logs concatenated.
  token_offsets_i32: Type.Optional(Bin),
  token_ids_i32: Type.Optional(Bin),
  loss_mask_u8: Type.Optional(Bin),
  logprobs_f32: Type.Optional(Bin),
  token_rewards_f32: Type.Optional(Bin),
  prompt_lengths_i32: Type.Optional(Bin),
  turn_counts_i32: Type.Optional(Bin),
  turn_starts_i32: Type.Optional(Bin),
  turn_ends_i32: Type.Optional(Bin),
  // Once a trainer has begun a weight update (PROTOCOL.md "Versions"): the oldest and newest
  // version ordinal that produced the group's turns, and in token mode each id's ordinal (-1 at
  // prompt and inserted ids), aligned with token_ids_i32.
  min_version: Type.Optional(Type.Integer({ minimum: 0 })),
  max_version: Type.Optional(Type.Integer({ minimum: 0 })),
  token_versions_i32: Type.Optional(Bin),
  /** Endless streams: the window the group belongs to (its filter verdict comes in that `window` frame). */
  window: Type.Optional(Count),
  /** Rollouts with max_staleness: the counts the group was admitted under (PROTOCOL.md "Staleness"). */
  admitted: Type.Optional(AdmittedSchema),
});
export type GroupFrame = Static<typeof GroupFrameSchema>;

/** A filter verdict over groups (a rollout's in `batch`, an endless stream window's in `window`). */
const verdictFields = {
  kept: Type.Array(GroupId),
  dropped: Type.Array(GroupId),
  failed_groups: Type.Array(GroupId),
  metrics: MetricsSchema,
  episodes: Count,
  failed: Count,
  /** Groups a cancel stopped before they started (also in failed_groups; no group frame comes for them). */
  not_started: Type.Optional(Type.Array(GroupId)),
  /** drop_older_than: finished groups not sent because they were too old (no group frame comes for them). */
  stale_dropped: Type.Optional(Type.Array(GroupId)),
};

export const BatchFrameSchema = map({
  type: Type.Literal("batch"),
  rollout: Type.String(),
  ...verdictFields,
  /** Endless streams: the windows whose `window` frame was sent. */
  windows: Type.Optional(Count),
  /** A `played_episodes` rollout's: each group's filter score, as batch delivery's group frames carry it. */
  group_scores: Type.Optional(Type.Array(Type.Union([Type.Number(), Type.Null()]))),
});
export type BatchFrame = Static<typeof BatchFrameSchema>;

/** Endless streams: one window's filter verdict and metrics, as a `batch` frame gives a rollout's. */
const windowFields = {
  rollout: Type.String(),
  window: Count,
  /** The window's groups: first .. first + groups - 1. */
  first: GroupId,
  groups: Count,
  ...verdictFields,
};
export const WindowFrameSchema = map({ type: Type.Literal("window"), ...windowFields });
export type WindowFrame = Static<typeof WindowFrameSchema>;

/**
 * The groups delivered (every session's) while one version was in force, and their ages then
 * (the ordinal in force − min_version; PROTOCOL.md "Staleness").
 */
export const AgeSummarySchema = map({
  groups: Count,
  min: Count,
  max: Count,
  mean: Type.Number({ minimum: 0 }),
});
export type AgeSummary = Static<typeof AgeSummarySchema>;

/** A replica that did not do what an update asked (pause or resume), and the engine's reason. */
const ReplicaProblemSchema = map({ url: Type.String(), reason: Type.String() });

/** Every engine is paused (or out of routing) and admission is closed: move the weights now. */
export const UpdateBegunSchema = map({
  type: Type.Literal("update_begun"),
  id: Type.String(),
  /** The version in force during the update (the one before it). */
  version: VersionSchema,
  /** "held_elsewhere" when begin_update said so: no engine was asked anything; absent otherwise. */
  engines: Type.Optional(Type.Literal("held_elsewhere")),
  /** Replicas paused through the engine's own /pause. */
  paused: Count,
  /** Replicas without /pause whose in-flight requests were aborted, to be continued after the update. */
  aborted: Count,
  /** Replicas that failed to pause: taken out of routing until they answer again. */
  out_of_routing: Type.Array(Type.String()),
  /** Engine requests in flight at the moment admission closed. */
  in_flight: Count,
  /** The groups delivered under `version` and their ages; absent when none was. */
  ages: Type.Optional(AgeSummarySchema),
  /** Of out_of_routing, those asked to /pause that refused or failed, with the reason. */
  refused: Type.Array(ReplicaProblemSchema),
});
export type UpdateBegun = Static<typeof UpdateBegunSchema>;

/** The engines run `version` and admission is open again. */
export const UpdateEndedSchema = map({
  type: Type.Literal("update_ended"),
  id: Type.String(),
  version: VersionSchema,
  /** "held_elsewhere" when its begin_update said so: no engine was resumed here; absent otherwise. */
  engines: Type.Optional(Type.Literal("held_elsewhere")),
  /** Replicas still paused after /resume was retried: out of routing, with the reason. */
  failed_to_resume: Type.Array(ReplicaProblemSchema),
});
export type UpdateEnded = Static<typeof UpdateEndedSchema>;

export const ProgressFrameSchema = map({
  type: Type.Literal("progress"),
  rollout: Type.String(),
  episodes_done: Count,
  episodes_total: Count,
  groups_done: Count,
  failed: Count,
});
export type ProgressFrame = Static<typeof ProgressFrameSchema>;

/**
 * Unasked, to a running rollout an open weight update holds once its trainer's connection is
 * gone: a notice (the rollout goes on and ends with its batch as usual), not an error.
 */
export const HeldFrameSchema = map({
  type: Type.Literal("held"),
  rollout: Type.String(),
  /** The open update's id. */
  update: Type.String(),
  /** Which update, open how long, what it paused, the version in force, where its trainer is. */
  message: Type.String(),
});
export type HeldFrame = Static<typeof HeldFrameSchema>;

export const ErrorFrameSchema = map({
  type: Type.Literal("error"),
  code: Type.Enum(ERROR_CODES),
  message: Type.String(),
  rollout: Type.Optional(Type.String()),
  /** The env-hosting session an error concerns. */
  id: Type.Optional(Type.String()),
  field: Type.Optional(Type.String()),
});
export type ErrorFrame = Static<typeof ErrorFrameSchema>;

export const OpenedEpisodeSchema = map({
  env_id: EnvId,
  group: GroupId,
  seed: Seed,
  messages: Type.Array(ChatMessageSchema),
  /** Token sessions: the first prompt's ids, generation prompt and prefill included. */
  prompt_ids: Type.Optional(Type.Array(Type.Integer())),
});
export type OpenedEpisode = Static<typeof OpenedEpisodeSchema>;

export const EnvOpenedSchema = map({
  type: Type.Literal("env_opened"),
  id: Type.String(),
  episodes: Type.Array(OpenedEpisodeSchema),
});
export type EnvOpened = Static<typeof EnvOpenedSchema>;

export const StepResultSchema = map({
  env_id: EnvId,
  parsed: Type.Array(Type.String()),
  actions: Type.Array(Type.String()),
  reward: Type.Number(),
  reward_text: Type.String(),
  format_penalty: Type.Boolean(),
  done: Type.Boolean(),
  success: Type.Boolean(),
  messages: Type.Union([Type.Array(ChatMessageSchema), Type.Null()]),
  /** `messages: "new"` sessions: how many messages of the previous chat the next one starts with. */
  keep: Type.Optional(Type.Integer({ minimum: 0 })),
  /** Token sessions: the ids to append after the sampled ids before the next turn (null when done). */
  next_ids: Type.Optional(Type.Union([Type.Array(Type.Integer()), Type.Null()])),
});
export type StepResult = Static<typeof StepResultSchema>;

export const EnvSteppedSchema = map({
  type: Type.Literal("env_stepped"),
  id: Type.String(),
  results: Type.Array(StepResultSchema),
});
export type EnvStepped = Static<typeof EnvSteppedSchema>;

export const EnvClosedSchema = map({
  type: Type.Literal("env_closed"),
  id: Type.String(),
  episodes: Type.Array(EpisodeSchema),
  metrics: MetricsSchema,
});
export type EnvClosed = Static<typeof EnvClosedSchema>;

export const ClosingSchema = map({
  type: Type.Literal("closing"),
  reason: Type.String(),
  deadline_ms: Count,
});
export type Closing = Static<typeof ClosingSchema>;

// Watch frames: copies for read-only watchers, outside credit and acknowledgement.
const StreamId = Type.Integer({ minimum: 1 });
const watchedRolloutFields = {
  /** The server's number for the rollout, unique among the server's rollouts. */
  stream: StreamId,
  /** The id its own client gave the rollout (for display; it names nothing a watcher can act on). */
  rollout: Type.String(),
  mode: ModeSchema,
  delivery: DeliverySchema,
  tags: Type.Array(map({ tag: Type.String(), groups: GroupCount })),
  group_size: GroupSize,
  seed: Seed,
  groups_done: Count,
  /** Present (true) only for an endless stream: its groups come in windows, each with a `watch_window`. */
  endless: Type.Optional(Type.Boolean()),
};

export const WatchedRolloutSchema = map(watchedRolloutFields);
export type WatchedRollout = Static<typeof WatchedRolloutSchema>;

export const WatchingSchema = map({
  type: Type.Literal("watching"),
  limits: map({
    max_watchers: Type.Integer({ minimum: 1 }),
    // Added later in version 1: present from servers that enforce it.
    max_watch_buffer_bytes: Type.Integer({ minimum: 1 }),
  }),
  /** Rollouts running when the subscription started. */
  rollouts: Type.Array(WatchedRolloutSchema),
});
export type Watching = Static<typeof WatchingSchema>;

export const WatchRolloutSchema = map({ type: Type.Literal("watch_rollout"), ...watchedRolloutFields });
export type WatchRollout = Static<typeof WatchRolloutSchema>;

export const WatchGroupSchema = map({
  type: Type.Literal("watch_group"),
  stream: StreamId,
  rollout: Type.String(),
  group: GroupId,
  tag: Type.String(),
  seed: Seed,
  episodes: Type.Array(EpisodeSchema),
});
export type WatchGroup = Static<typeof WatchGroupSchema>;

export const WatchBatchSchema = map({
  type: Type.Literal("watch_batch"),
  stream: StreamId,
  rollout: Type.String(),
  kept: Type.Array(GroupId),
  dropped: Type.Array(GroupId),
  failed_groups: Type.Array(GroupId),
  /** The filter's score per group id (null for a failed group). */
  group_scores: Type.Array(Type.Union([Type.Number(), Type.Null()])),
  metrics: MetricsSchema,
  episodes: Count,
  failed: Count,
  /** Set when the rollout ended in a server error instead of a verdict. */
  error: Type.Optional(Type.String()),
});
export type WatchBatch = Static<typeof WatchBatchSchema>;

/** An endless stream's window verdict, as its `window` frame, with the version in force when it was made. */
export const WatchWindowSchema = map({
  type: Type.Literal("watch_window"),
  stream: StreamId,
  ...windowFields,
  version: VersionSchema,
});
export type WatchWindow = Static<typeof WatchWindowSchema>;

export const WatchGapSchema = map({
  type: Type.Literal("watch_gap"),
  /** Watch frames this watcher lost since the last one it was sent. */
  dropped: Count,
  /** The rollouts (stream numbers) whose frames were lost. */
  streams: Type.Array(StreamId),
});
export type WatchGap = Static<typeof WatchGapSchema>;

export const ServerMessageSchema = Type.Union([
  WelcomeSchema,
  GroupFrameSchema,
  BatchFrameSchema,
  ProgressFrameSchema,
  HeldFrameSchema,
  ErrorFrameSchema,
  EnvOpenedSchema,
  EnvSteppedSchema,
  EnvClosedSchema,
  ClosingSchema,
  WatchingSchema,
  WatchRolloutSchema,
  WatchGroupSchema,
  WatchBatchSchema,
  WatchWindowSchema,
  WatchGapSchema,
  WindowFrameSchema,
  UpdateBegunSchema,
  UpdateEndedSchema,
]);
export type ServerMessage = Static<typeof ServerMessageSchema>;
export type ServerMessageType = ServerMessage["type"];

/** Schema of each server message, by `type`. */
export const SERVER_MESSAGE_SCHEMAS = {
  welcome: WelcomeSchema,
  group: GroupFrameSchema,
  batch: BatchFrameSchema,
  progress: ProgressFrameSchema,
  held: HeldFrameSchema,
  error: ErrorFrameSchema,
  env_opened: EnvOpenedSchema,
  env_stepped: EnvSteppedSchema,
  env_closed: EnvClosedSchema,
  closing: ClosingSchema,
  watching: WatchingSchema,
  watch_rollout: WatchRolloutSchema,
  watch_group: WatchGroupSchema,
  watch_batch: WatchBatchSchema,
  watch_window: WatchWindowSchema,
  watch_gap: WatchGapSchema,
  window: WindowFrameSchema,
  update_begun: UpdateBegunSchema,
  update_ended: UpdateEndedSchema,
} as const satisfies Record<ServerMessageType, TSchema>;
export const SERVER_MESSAGE_TYPES = Object.keys(SERVER_MESSAGE_SCHEMAS) as ServerMessageType[];

// ---------------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------------

export type ValidationFailure<Code extends string> = {
  ok: false;
  code: Code;
  /** Path of the offending field, e.g. `tags[0].groups`; "" for the frame itself. */
  field: string;
  message: string;
};
export type ClientValidation =
  | { ok: true; message: ClientMessage }
  | ValidationFailure<"bad_frame" | "unknown_type">;
export type ServerValidation =
  | { ok: true; message: ServerMessage }
  | ValidationFailure<"bad_frame" | "unknown_type">;

type Validators = Map<string, Validator>;

function compileAll(schemas: Record<string, TSchema>): Validators {
  return new Map(Object.entries(schemas).map(([type, schema]) => [type, Compile(schema)]));
}

// Compiled once at load: validateClientMessage runs on every frame.
const clientValidators = compileAll(CLIENT_MESSAGE_SCHEMAS);
// Only clients and tests need these; compiled on first use.
let serverValidators: Validators | undefined;

/**
 * True when `value` is a msgpack map with a string `type`. A frame failing this is undecodable
 * in PROTOCOL.md's sense (close 1002), whereas other validation failures get an `error` frame.
 */
export function hasFrameEnvelope(value: unknown): value is { type: string } & Record<string, unknown> {
  return isMap(value) && typeof value["type"] === "string";
}

/**
 * Validates a decoded client frame. On failure returns the first problem: `field` is its path and
 * `message` names the path, the bad value and what is allowed. A `hello` whose integer `protocol`
 * differs from PROTOCOL_VERSION is accepted regardless of its other fields (only `protocol` and a
 * string `client` are kept), so the server can answer `protocol_version` as the spec requires.
 */
export function validateClientMessage(value: unknown): ClientValidation {
  return validate(value, clientValidators, CLIENT_MESSAGE_TYPES, true) as ClientValidation;
}

/** Validates a decoded server frame (for clients and tests); same failure shape as validateClientMessage. */
export function validateServerMessage(value: unknown): ServerValidation {
  serverValidators ??= compileAll(SERVER_MESSAGE_SCHEMAS);
  return validate(value, serverValidators, SERVER_MESSAGE_TYPES, false) as ServerValidation;
}

function validate(
  value: unknown,
  validators: Validators,
  types: readonly string[],
  client: boolean,
): { ok: true; message: unknown } | ValidationFailure<"bad_frame" | "unknown_type"> {
  if (!isMap(value)) {
    return fail("bad_frame", "", `frame must be a msgpack map with a string "type", got ${show(value)}`);
  }
  const type = value["type"];
  if (typeof type !== "string") {
    return fail(
      "bad_frame",
      "type",
      `type: got ${show(type)}, expected a string (one of ${types.join(", ")})`,
    );
  }
  const validator = validators.get(type);
  if (validator === undefined) {
    return fail("unknown_type", "type", `unknown message type ${show(type)}; allowed: ${types.join(", ")}`);
  }
  // No client message holds a bin or an extension value: refused before the schema walks one
  // (TypeBox reads a 900 KB bin where a map is expected as 900,000 keys: seconds of CPU).
  if (client) {
    const foreign = firstNonMap(value);
    if (foreign !== null) {
      const field = formatPath(foreign);
      const node = schemaAt(validator.Type() as unknown as SchemaNode, foreign);
      return fail(
        "bad_frame",
        field,
        `${field}: got ${show(valueAt(value, foreign))}, expected ${node ? describe(node) : "nothing here"}`,
      );
    }
  }
  const frame: unknown = value; // Check() narrows its argument; keep `value` usable below
  if (validator.Check(frame)) return { ok: true, message: frame };
  if (client && type === "hello") {
    const protocol = value["protocol"];
    if (Number.isSafeInteger(protocol) && protocol !== PROTOCOL_VERSION) {
      const clientName = typeof value["client"] === "string" ? value["client"].slice(0, MAX_ID_LENGTH) : "";
      const hello: Hello = { type: "hello", protocol: protocol as number, client: clientName };
      return { ok: true, message: hello };
    }
  }
  return explain(validator, value);
}

/**
 * The path of a value inside `root` that is an object but neither an array nor a map (a bin, an
 * extension), or null. Runs on every client frame: the walk keeps no paths, and the one found
 * is located afterwards (decoding bounds the depth to 64).
 */
function firstNonMap(root: Record<string, unknown>): string[] | null {
  const stack: object[] = [root];
  while (stack.length > 0) {
    const value = stack.pop() as Record<string, unknown> | unknown[];
    if (Array.isArray(value)) {
      // Most arrays hold numbers (token ids): nothing to look into.
      for (let i = 0; i < value.length; i++) {
        const item = value[i];
        if (typeof item === "object" && item !== null) stack.push(item);
      }
    } else if (isMap(value)) {
      for (const key in value) {
        const item = value[key];
        if (typeof item === "object" && item !== null) stack.push(item);
      }
    } else return pathTo(root, value);
  }
  return null;
}

/** The keys leading from `node` to `target` (which is inside it), or null. */
function pathTo(node: unknown, target: object): string[] | null {
  if (node === target) return [];
  if (typeof node !== "object" || node === null || !(Array.isArray(node) || isMap(node))) return null;
  for (const [key, item] of Object.entries(node)) {
    const rest = pathTo(item, target);
    if (rest !== null) return [key, ...rest];
  }
  return null;
}

function fail<Code extends string>(code: Code, field: string, message: string): ValidationFailure<Code> {
  return { ok: false, code, field, message };
}

// --- error explanation (slow path only) ------------------------------------------------------

type SchemaNode = Record<string, unknown>;

function explain(validator: Validator, value: unknown): ValidationFailure<"bad_frame"> {
  const errors = validator.Errors(value);
  const root = validator.Type() as unknown as SchemaNode;
  const error = errors[0];
  if (error === undefined) return fail("bad_frame", "", "invalid frame");
  const path = pointerToSegments(error.instancePath);
  const schemaPath = pointerToSegments(error.schemaPath.replace(/^#/, ""));

  // A bin or timestamp where a map is expected yields errors about its insides (TypeBox sees an
  // object with keys "0", "1", …); report the value itself instead.
  for (let k = 1; k <= path.length; k++) {
    const inner = valueAt(value, path.slice(0, k));
    if (typeof inner === "object" && inner !== null && !Array.isArray(inner) && !isMap(inner)) {
      const field = formatPath(path.slice(0, k));
      const node = schemaAt(root, path.slice(0, k));
      return fail(
        "bad_frame",
        field,
        `${field}: got ${show(inner)}, expected ${node ? describe(node) : "a map"}`,
      );
    }
  }

  if (error.keyword === "required") {
    const missing = (error.params as { requiredProperties: string[] }).requiredProperties[0];
    const node = resolve(root, schemaPath);
    const props = node?.["properties"] as Record<string, SchemaNode> | undefined;
    const field = formatPath([...path, missing]);
    const expected = props?.[missing] ? `, expected ${describe(props[missing])}` : "";
    return fail("bad_frame", field, `${field}: missing${expected}`);
  }

  let unknownPath: string[] | undefined;
  let objectSchemaPath = schemaPath;
  if (error.keyword === "boolean" && schemaPath.at(-1) === "additionalProperties") {
    unknownPath = path;
    objectSchemaPath = schemaPath.slice(0, -1);
  } else if (error.keyword === "additionalProperties") {
    const names = (error.params as { additionalProperties: string[] }).additionalProperties;
    unknownPath = [...path, names[0]];
  }
  if (unknownPath !== undefined) {
    const node = resolve(root, objectSchemaPath);
    const field = formatPath(unknownPath);
    const patterns = Object.keys((node?.["patternProperties"] as object | undefined) ?? {});
    if (patterns.length > 0) {
      return fail(
        "bad_frame",
        field,
        `${field}: key not allowed; allowed keys match ${patterns.join(" or ")}`,
      );
    }
    const allowed = Object.keys((node?.["properties"] as object | undefined) ?? {});
    return fail("bad_frame", field, `${field}: unknown field; allowed here: ${allowed.join(", ")}`);
  }

  const field = formatPath(path);
  const node = resolve(root, schemaPath);
  const got = show(valueAt(value, path));
  const expected = node ? describe(node) : error.message;
  return fail("bad_frame", field, `${field || "frame"}: got ${got}, expected ${expected}`);
}

function pointerToSegments(pointer: string): string[] {
  if (pointer === "" || pointer === "/") return [];
  return pointer
    .slice(1)
    .split("/")
    .map((s) => s.replace(/~1/g, "/").replace(/~0/g, "~"));
}

function resolve(root: SchemaNode, segments: readonly string[]): SchemaNode | undefined {
  let node: unknown = root;
  for (const segment of segments) {
    if (typeof node !== "object" || node === null) return undefined;
    node = (node as SchemaNode)[segment];
  }
  return typeof node === "object" && node !== null ? (node as SchemaNode) : undefined;
}

/** The schema that applies at an instance path (properties and array items only). */
function schemaAt(root: SchemaNode, segments: readonly string[]): SchemaNode | undefined {
  let node: SchemaNode | undefined = root;
  for (const segment of segments) {
    if (node === undefined) return undefined;
    const props = node["properties"] as Record<string, SchemaNode> | undefined;
    node =
      props && Object.hasOwn(props, segment) ? props[segment] : (node["items"] as SchemaNode | undefined);
  }
  return node;
}

function valueAt(value: unknown, segments: readonly string[]): unknown {
  let current = value;
  for (const segment of segments) {
    if (typeof current !== "object" || current === null) return undefined;
    current = (current as Record<string, unknown>)[segment];
  }
  return current;
}

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** `["tags", "0", "groups"]` → `tags[0].groups`. */
function formatPath(segments: readonly string[]): string {
  let out = "";
  for (const segment of segments) {
    if (/^(0|[1-9][0-9]*)$/.test(segment)) out += `[${segment}]`;
    else if (IDENTIFIER.test(segment)) out += out === "" ? segment : `.${segment}`;
    else out += `[${show(segment)}]`;
  }
  return out;
}

const MAX_SHOWN_CHARS = 40;

/** Short, safe rendering of an arbitrary (possibly huge or hostile) value for an error message. */
function show(value: unknown): string {
  if (value === undefined) return "nothing";
  if (value === null) return "null";
  switch (typeof value) {
    case "string": {
      const shown = JSON.stringify(value.slice(0, MAX_SHOWN_CHARS));
      return value.length > MAX_SHOWN_CHARS ? `${shown.slice(0, -1)}…" (${value.length} chars)` : shown;
    }
    case "number":
      return Object.is(value, -0) ? "-0" : String(value);
    case "boolean":
    case "bigint":
      return String(value);
    default:
      break;
  }
  if (value instanceof Uint8Array) return `bin (${value.byteLength} bytes)`;
  if (Array.isArray(value)) return `an array of ${value.length} items`;
  if (value instanceof Date) return "a timestamp";
  if (isMap(value)) return "a map";
  return `a ${typeof value === "object" ? (value.constructor?.name ?? "object") : typeof value}`;
}

function range(node: SchemaNode): string {
  const min = node["minimum"] ?? node["exclusiveMinimum"];
  const max = node["maximum"] ?? node["exclusiveMaximum"];
  const lo = node["exclusiveMinimum"] !== undefined ? "(" : "[";
  const hi = node["exclusiveMaximum"] !== undefined ? ")" : "]";
  if (min !== undefined && max !== undefined) return ` in ${lo}${min}, ${max}${hi}`;
  if (min !== undefined) return lo === "(" ? ` > ${min}` : ` >= ${min}`;
  if (max !== undefined) return hi === ")" ? ` < ${max}` : ` <= ${max}`;
  return "";
}

function lengths(node: SchemaNode, lo: string, hi: string, unit: string): string {
  const min = node[lo] as number | undefined;
  const max = node[hi] as number | undefined;
  if (min !== undefined && max !== undefined) return ` of ${min}..${max} ${unit}`;
  if (max !== undefined) return ` of at most ${max} ${unit}`;
  if (min !== undefined) return ` of at least ${min} ${unit}`;
  return "";
}

/** What a schema allows, in words: "an integer in [1, 4096]", "one of "train", "val"". */
function describe(node: SchemaNode): string {
  if (Array.isArray(node["enum"])) return `one of ${node["enum"].map((v) => JSON.stringify(v)).join(", ")}`;
  if (node["const"] !== undefined) return JSON.stringify(node["const"]);
  if (Array.isArray(node["anyOf"])) return (node["anyOf"] as SchemaNode[]).map(describe).join(" or ");
  if ("~refine" in node && typeof node["description"] === "string") return `a ${node["description"]}`;
  switch (node["type"]) {
    case "integer":
      return `an integer${range(node)}`;
    case "number":
      return `a finite number${range(node)}`;
    case "string":
      return `a string${lengths(node, "minLength", "maxLength", "characters")}`;
    case "boolean":
      return "a boolean";
    case "null":
      return "null";
    case "array": {
      const items = node["items"] as SchemaNode | undefined;
      const of = items ? `, each ${describe(items)}` : "";
      return `an array${lengths(node, "minItems", "maxItems", "items")}${of}`;
    }
    case "object": {
      const props = node["properties"] as Record<string, unknown> | undefined;
      if (props === undefined) return "a map";
      const required = new Set((node["required"] as string[] | undefined) ?? []);
      const names = Object.keys(props).map((name) => (required.has(name) ? name : `${name}?`));
      return `a map {${names.join(", ")}}`;
    }
    default:
      return "a valid value";
  }
}
