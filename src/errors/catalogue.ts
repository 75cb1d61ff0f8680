// Every error rollgym reports at a boundary, by code: what each boundary makes of it (the CLI's
// exit status, the WebSocket `error` frame's code, the HTTP status, the WebSocket close code) and
// its message, written once here. Code raises `new RollgymError(code, params)`; the boundaries
// (connection.ts, the web routes, the upgrade, cli/main.ts) translate through boundary.ts.
import { CLOSE_CODES, type CloseCode, type ErrorCode } from "../../protocol/codec.ts";
import { MAX_VERSION_ORDINAL, type Version } from "../../protocol/messages.ts";

export interface CatalogueEntry<P> {
  /** The `error` frame's code (PROTOCOL.md "Error codes"), when the error is answered with one. */
  frame?: ErrorCode;
  /** The WebSocket close code, when the error ends the connection. */
  close?: CloseCode;
  /** The close reason, when it is not the message (a frame already carries that). */
  closeReason?: string;
  /** The HTTP status, when the error answers a request. */
  http?: number;
  /** The CLI's exit status: 2 for a mistake in the input, 1 for work that failed. */
  exit?: 1 | 2;
  /** The request field at fault, when the code always names the same one. */
  field?: string;
  /**
   * The frame names the field before the rollout or env session it is about (the order these
   * frames have always had; clients see the same bytes).
   */
  fieldFirst?: true;
  message: (params: P) => string;
}

const entry = <P = Record<string, never>>(e: CatalogueEntry<P>): CatalogueEntry<P> => e;

/** Which frame named a version: refused at begin, nothing paused; refused at end, the update stays open. */
type UpdateAt = { id: string; at: "begin" | "end" };
const outcome = (id: string, at: "begin" | "end") =>
  at === "begin"
    ? `begin_update ${JSON.stringify(id)} is refused before any engine paused`
    : `update ${JSON.stringify(id)} stays open`;
const versionText = ({ label, ordinal }: Version) => `${JSON.stringify(label)} (ordinal ${ordinal})`;

/** A message made elsewhere (a validator's, the engine's): the catalogue passes it through. */
type Said = { message: string };
const said = ({ message }: Said) => message;

export const CATALOGUE = {
  // The command line.
  usage: entry<Said>({ exit: 2, message: said }),
  /** envs' EnvConfigError (envs import nothing of ours, so it carries the code as a string). */
  env_config: entry<Said>({ exit: 2, message: said }),
  command_failed: entry<Said>({ exit: 1, message: said }),
  /** A config file, key or value (config/schema.ts ConfigError names the key and where it was set). */
  config: entry<Said>({ exit: 2, message: said }),
  /** An episode file that is not one rollout --out writes (record/episode-reader.ts). */
  episode_file: entry<Said>({ exit: 2, message: said }),
  /** Scores given to the group filter that it cannot rank (rollout/filter.ts). */
  filter_input: entry<{ field: string; message: string }>({
    exit: 2,
    message: ({ field, message }) => `${field}: ${message}`,
  }),
  /** The mock engine's qwen3 tokenizer without its optional package. */
  tokenizer_missing: entry<Said>({ exit: 2, message: said }),

  // Work that failed below the command: not the input's fault, and not a bug either.
  /** No engine endpoint answered the policy's preflight. */
  engine_unreachable: entry<Said>({ exit: 1, message: said }),
  /** An engine that answers but does not serve the configured model. */
  model_not_served: entry<Said>({ exit: 2, message: said }),
  /** A generation that failed for good, after retries (llm/policy.ts PolicyError). */
  policy_failed: entry<Said>({ exit: 1, message: said }),
  /** One engine request that failed (llm/http.ts EngineError); the policy may retry it. */
  engine_failed: entry<Said>({ exit: 1, message: said }),
  replica_pool_closed: entry({ exit: 1, message: () => "replica pool closed" }),
  /** begin() while an update is open, or end() without one (llm/version-book.ts; the server checks first). */
  update_state: entry<Said>({ exit: 1, message: said }),
  /** A remote OpenEnv episode that cannot go on (remote-envs imports nothing of ours: a string code). */
  openenv_failed: entry<{ reason: string; detail: string }>({
    exit: 1,
    message: ({ reason, detail }) => `${reason}: ${detail}`,
  }),

  // A connection's frames that cannot be read: the connection closes.
  text_frame: entry({
    close: CLOSE_CODES.undecodable,
    message: () => "text frames are not part of the protocol; send binary msgpack",
  }),
  undecodable_frame: entry<Said>({
    close: CLOSE_CODES.undecodable,
    message: ({ message }) => `undecodable frame: ${message}`,
  }),
  no_envelope: entry({
    close: CLOSE_CODES.undecodable,
    message: () => "every frame must be a msgpack map with a string type",
  }),
  invalid_hello: entry<Said>({
    close: CLOSE_CODES.noHello,
    message: ({ message }) => `the first frame must be a valid hello: ${message}`,
  }),
  no_hello: entry<{ type: string }>({
    close: CLOSE_CODES.noHello,
    message: ({ type }) => `the first frame must be hello, not ${type}`,
  }),
  protocol_version: entry<{ client: number; server: number }>({
    frame: "protocol_version",
    close: CLOSE_CODES.versionMismatch,
    closeReason: "protocol version mismatch",
    message: ({ client, server }) => `client speaks protocol ${client}, server speaks ${server}`,
  }),
  unknown_session: entry<{ session: string; graceS: number }>({
    frame: "unknown_session",
    close: CLOSE_CODES.resumeRefused,
    closeReason: "resume refused",
    message: ({ session, graceS }) =>
      `session ${session} is unknown or expired (sessions live ${graceS} s after a disconnect)`,
  }),

  // A frame that fails its schema (protocol/messages.ts says what is wrong).
  bad_frame: entry<Said>({ frame: "bad_frame", fieldFirst: true, message: said }),
  unknown_type: entry<Said>({ frame: "unknown_type", fieldFirst: true, message: said }),
  hello_again: entry({
    frame: "bad_frame",
    field: "type",
    message: () => "hello was already received on this connection",
  }),
  internal: entry<Said>({ frame: "internal", message: said }),

  // Flow control.
  unknown_group: entry<{ rollout: string; groups: readonly number[] }>({
    frame: "unknown_group",
    message: ({ rollout, groups }) =>
      `groups ${groups.join(", ")} of rollout ${rollout} are not awaiting acknowledgement`,
  }),
  unknown_rollout: entry<{ rollout: string }>({
    frame: "unknown_rollout",
    message: ({ rollout }) => `no rollout ${JSON.stringify(rollout)} in this session`,
  }),
  max_watchers: entry<{ max: number }>({
    frame: "limit",
    message: ({ max }) => `max_watchers is ${max}; every watch subscription is taken`,
  }),
  max_watchers_per_address: entry<{ max: number }>({
    frame: "limit",
    message: ({ max }) =>
      `max_watchers_per_address is ${max}; every watch subscription this address may hold is taken: unwatch or close one of them first`,
  }),

  // Rollout admission (admission.ts), in the order it checks.
  shutting_down: entry({
    frame: "shutting_down",
    message: () => "the server is shutting down and takes no new rollouts",
  }),
  rollout_id_taken: entry<{ id: string }>({
    frame: "duplicate_id",
    message: ({ id }) =>
      `rollout id ${JSON.stringify(id)} is already in use in this session (running, or with unacknowledged groups or batch frame)`,
  }),
  max_unacked_groups: entry<{ max: number; held: number }>({
    frame: "limit",
    message: ({ max, held }) =>
      `max_unacked_groups is ${max}; this session holds ${held} unacknowledged groups: acknowledge some first`,
  }),
  max_rollouts_per_connection: entry<{ max: number }>({
    frame: "limit",
    message: ({ max }) => `max_rollouts_per_connection is ${max}; wait for one to finish`,
  }),
  unknown_tag: entry<Said>({ frame: "unknown_tag", http: 404, message: said }),
  max_groups_per_rollout: entry<{ max: number; groups: number }>({
    frame: "limit",
    exit: 2,
    field: "tags",
    message: ({ max, groups }) => `max_groups_per_rollout is ${max}; this rollout asks for ${groups} groups`,
  }),
  max_episodes_per_rollout: entry<{ max: number; running: number; groups: number; groupSize: number }>({
    frame: "limit",
    exit: 2,
    field: "group_size",
    message: ({ max, running, groups, groupSize }) =>
      `max_episodes_in_flight is ${max}; ${running > 0 ? `${running} are running and ` : ""}this rollout adds ${groups} groups × ${groupSize} = ${groups * groupSize} episodes`,
  }),
  seed_range: entry<{ seed: number; groups: number; max: number }>({
    frame: "bad_frame",
    exit: 2,
    field: "seed",
    message: ({ seed, groups, max }) => {
      const n = Math.max(groups, 1);
      return `seeds ${seed}..${seed + n - 1} (${groups} groups from seed ${seed}) pass ${max}; allowed: a batch seed from 0 to ${max - n + 1} for ${groups} groups (seeds are never wrapped)`;
    },
  }),
  /** The episode budget's refusal (budget.ts words it). */
  episode_budget: entry<Said>({ frame: "limit", field: "group_size", message: said }),
  /** A request RAGEN would run into NaN or an assertion with (rollout/batch.ts words it). */
  unplayable: entry<Said>({ frame: "bad_frame", exit: 2, message: said }),
  stream_scores: entry({
    frame: "bad_frame",
    message: () =>
      "stream delivery needs scores that are final when a group finishes: use reward_normalization grouping state or method identity",
  }),
  tokens_need_engine: entry<{ policy: string }>({
    frame: "bad_frame",
    fieldFirst: true,
    message: ({ policy }) =>
      `tokens: true needs the server to run against a remote engine (--llm); it serves the built-in ${policy} policy`,
  }),
  policy_cannot_play: entry<{ policy: string; why: string }>({
    frame: "bad_frame",
    message: ({ policy, why }) => `the server's policy ${policy}: ${why}`,
  }),

  /** endless and ASYNC's fields (max_staleness, strict_staleness …) pace a stream; `field` names the one given. */
  needs_stream: entry<{ field: string }>({
    frame: "bad_frame",
    fieldFirst: true,
    message: ({ field }) => `${field} paces a stream rollout: it needs delivery "stream", not "batch"`,
  }),
  /** strict_staleness holds groups to max_staleness, so it needs one. */
  strict_needs_staleness: entry({
    frame: "bad_frame",
    fieldFirst: true,
    field: "strict_staleness",
    message: () =>
      "strict_staleness: true keeps every group within max_staleness versions, and this rollout has no max_staleness (set it in the request or rollgym.async.max_staleness)",
  }),

  // Weight updates (PROTOCOL.md "Weight updates"): only the trainer session brackets them.
  not_trainer: entry<{ type: string }>({
    frame: "not_trainer",
    message: ({ type }) =>
      `${type}: only the trainer session may bracket weight updates, and this session's hello did not say role "trainer"`,
  }),
  trainer_taken: entry<{ session: string }>({
    frame: "not_trainer",
    close: CLOSE_CODES.trainerTaken,
    closeReason: "another trainer is connected",
    message: ({ session }) =>
      `hello role "trainer": session ${session} is the trainer and is connected; one trainer at a time (a new one takes over only once the old one's connection is gone)`,
  }),
  trainer_token: entry<{ given: boolean }>({
    frame: "not_trainer",
    close: CLOSE_CODES.trainerToken,
    closeReason: "trainer token refused",
    field: "trainer_token",
    message: ({ given }) =>
      given
        ? 'hello role "trainer": trainer_token is not this server\'s trainer token'
        : 'hello role "trainer": this server reserves the trainer role; send its trainer token as hello.trainer_token',
  }),
  updates_unsupported: entry<{ policy: string; type: string }>({
    frame: "update",
    message: ({ policy, type }) =>
      `${type}: the server's policy ${policy} has no weight updates to coordinate`,
  }),
  update_open: entry<{ id: string; open: string }>({
    frame: "update",
    message: ({ id, open }) =>
      `begin_update ${JSON.stringify(id)}: update ${JSON.stringify(open)} is still open; send end_update for it first`,
  }),
  no_update: entry<{ id: string }>({
    frame: "update",
    message: ({ id }) => `end_update ${JSON.stringify(id)}: no update is open; send begin_update first`,
  }),
  update_id: entry<{ id: string; open: string }>({
    frame: "update",
    field: "id",
    fieldFirst: true,
    message: ({ id, open }) =>
      `end_update ${JSON.stringify(id)}: the open update is ${JSON.stringify(open)}; end it with that id`,
  }),
  ordinals_exhausted: entry<{ id: string; ordinal: number; label: string }>({
    frame: "update",
    message: ({ id, ordinal, label }) =>
      `begin_update ${JSON.stringify(id)}: the version in force, ${JSON.stringify(label)}, has ordinal ${ordinal}, the maximum; no end_update could name a greater one, so no update begins (the engines keep running)`,
  }),
  update_ending: entry<{ id: string }>({
    frame: "update",
    message: ({ id }) =>
      `end_update ${JSON.stringify(id)}: an end_update for this update is already resuming the engines`,
  }),
  update_expired: entry<{ id: string; late: boolean; maxS: number; label: string; ordinal: number }>({
    frame: "update",
    field: "max_update_s",
    message: ({ id, late, maxS, label, ordinal }) =>
      `${late ? `end_update ${JSON.stringify(id)}: ` : ""}update ${JSON.stringify(id)} expired: it stayed open longer than max_update_s (${maxS} s) without end_update, so the engines resumed at the old version ${JSON.stringify(label)} (ordinal ${ordinal}) and admission reopened; begin a new update`,
  }),
  update_pausing: entry<{ id: string }>({
    frame: "update",
    message: ({ id }) =>
      `end_update ${JSON.stringify(id)}: the engines are still pausing; wait for update_begun first`,
  }),
  version_not_increasing: entry<{ ordinal: number; current: number; label: string } & UpdateAt>({
    frame: "update",
    field: "version.ordinal",
    fieldFirst: true,
    message: ({ ordinal, current, label, id, at }) =>
      `version.ordinal: got ${ordinal}, must be greater than the current ${current} (${JSON.stringify(label)}) and at most ${MAX_VERSION_ORDINAL}; ${outcome(id, at)}${at === "begin" ? ": count on from the version in force (the trainer's welcome and every update_ended name it)" : ""}`,
  }),
  version_ordinal_max: entry<{ ordinal: number; max: number } & UpdateAt>({
    frame: "update",
    field: "version.ordinal",
    fieldFirst: true,
    message: ({ ordinal, max, id, at }) =>
      `version.ordinal: got ${ordinal}, must be at most ${max} (token_versions_i32 carries ordinals as int32); ${outcome(id, at)}`,
  }),
  /** end_update naming another version than its begin_update announced. */
  update_version: entry<{ id: string; got: Version; announced: Version }>({
    frame: "update",
    field: "version",
    fieldFirst: true,
    message: ({ id, got, announced }) =>
      `end_update ${JSON.stringify(id)}: version ${versionText(got)} is not the one its begin_update announced, ${versionText(announced)}; update ${JSON.stringify(id)} stays open: end it with the announced version`,
  }),
  update_failed: entry<Said>({ frame: "update", message: said }),

  // Env hosting.
  env_id_taken: entry<{ id: string }>({
    frame: "duplicate_id",
    message: ({ id }) => `env session ${JSON.stringify(id)} is already open`,
  }),
  max_env_sessions_per_connection: entry<{ max: number }>({
    frame: "limit",
    message: ({ max }) => `max_env_sessions_per_connection is ${max}; close one first`,
  }),
  /** The engine cannot do token mode as configured (rollgym.llm.count_tokens=usage). */
  tokens_unusable: entry<Said>({ frame: "bad_frame", field: "tokens", fieldFirst: true, message: said }),
  env_idle: entry<{ idleS: number; id: string }>({
    frame: "limit",
    field: "env_idle_s",
    message: ({ idleS, id }) =>
      `env_idle_s is ${idleS}; env session ${JSON.stringify(id)} took no step for that long and is closed (its episodes are released): open a new one`,
  }),
  /** A token session's prompt ids take the memory budget past a bound (budget.ts words it). */
  memory_budget_prompts: entry<Said>({ frame: "limit", field: "groups", message: said }),
  env_open_failed: entry<{ message: string; engine: boolean }>({
    frame: "internal",
    message: ({ message, engine }) => `${engine ? "engine: " : ""}${message}`,
  }),
  unknown_env_session: entry<{ id: string }>({
    frame: "unknown_env",
    message: ({ id }) => `no env session ${JSON.stringify(id)} is open on this connection`,
  }),
  /** An env step past the memory budget (budget.ts words it). */
  memory_budget_step: entry<Said>({ frame: "limit", field: "responses", message: said }),
  /** A rollout cancelled because its turns took the memory budget past a bound (budget.ts). */
  memory_shed: entry<Said>({ frame: "limit", field: "max_held_bytes", message: said }),
  unknown_env_id: entry<{ envId: number; open: number }>({
    frame: "unknown_env",
    field: "responses",
    fieldFirst: true,
    message: ({ envId, open }) => `env_id ${envId} is not open here (0..${open - 1})`,
  }),
  episode_done: entry<{ envId: number }>({
    frame: "episode_done",
    field: "responses",
    fieldFirst: true,
    message: ({ envId }) => `env_id ${envId} is done; it takes no more responses`,
  }),
  bad_responses: entry<Said>({ frame: "bad_frame", field: "responses", fieldFirst: true, message: said }),
  /** A token session's step failed after its responses were applied: it cannot go on. */
  env_step_engine: entry<{ message: string; id: string }>({
    frame: "internal",
    message: ({ message, id }) =>
      `engine: ${message}; env session ${JSON.stringify(id)} is closed, open a new one`,
  }),

  // HTTP: the WebSocket upgrade and the page's routes.
  no_ws_route: entry({
    http: 404,
    message: () => "no WebSocket route here; use /v1/rollouts or /openenv/TAG/ws",
  }),
  closing: entry({ http: 503, message: () => "the server is shutting down" }),
  foreign_origin: entry<Said>({ http: 403, message: said }),
  unauthorized: entry<{ query: boolean }>({
    http: 401,
    message: ({ query }) =>
      `a valid bearer token is required (Authorization: Bearer TOKEN${query ? " or ?token=" : ""})`,
  }),
  max_connections: entry<{ max: number }>({
    http: 503,
    message: ({ max }) => `max_connections is ${max}; every WebSocket connection is taken, try again later`,
  }),
  max_connections_per_address: entry<{ max: number }>({
    http: 503,
    message: ({ max }) => `max_connections_per_address is ${max}; close a connection from this address first`,
  }),
  not_found: entry<Said>({ http: 404, message: said }),
  bad_request: entry<Said>({ http: 400, message: said }),
  too_large: entry<Said>({ http: 413, message: said }),
  unavailable: entry<Said>({ http: 503, message: said }),
  check_failed: entry<Said>({ http: 500, message: said }),
} as const;

export type Code = keyof typeof CATALOGUE;
export type ParamsOf<C extends Code> = (typeof CATALOGUE)[C] extends CatalogueEntry<infer P> ? P : never;

export function isCode(value: unknown): value is Code {
  return typeof value === "string" && Object.hasOwn(CATALOGUE, value);
}

/** An error with a catalogue code: the boundaries read the code, never the class. */
export class RollgymError<C extends Code = Code> extends Error {
  readonly code: C;
  /** The request field at fault (the entry's, unless this error names another). */
  field: string | undefined;

  constructor(code: C, params: ParamsOf<C>, field?: string) {
    const known = CATALOGUE[code] as CatalogueEntry<ParamsOf<C>>;
    super(known.message(params));
    this.name = "RollgymError";
    this.code = code;
    this.field = field ?? known.field;
  }
}
