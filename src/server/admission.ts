// Admission: every check a `rollout` frame (or an `env_open`) passes before any episode starts,
// each run once and in this order (the first that fails is the refusal the client gets). A
// refusal is a RollgymError whose code says which check (errors/catalogue.ts).
import { unknownTagMessage } from "../../envs/registry.ts";
import type { EnvOpen, GroupRange, RolloutRequest } from "../../protocol/messages.ts";
import { ASYNC } from "../../protocol/settings.ts";
import { messageOf } from "../errors/boundary.ts";
import { RollgymError } from "../errors/catalogue.ts";
import type { TokenEngine } from "../llm/token-engine.ts";
import {
  type BatchRequest,
  groupLocalScores,
  policyRefusal,
  validateBatchRequest,
} from "../rollout/batch.ts";
import { checkRolloutShape, isShapeRefusal, type RolloutLimits } from "../rollout/limits.ts";
import { resolveRequest } from "../rollout/request.ts";
import { budgetRefusal } from "./budget.ts";
import { episodesBytes } from "./memory-costs.ts";
import type { Session } from "./session.ts";
import type { ServerState } from "./state.ts";

/** A rollout that passed every check: the request to play (its pacing in `request.pace`), the engine that plays it in token mode. */
export interface AdmittedRollout {
  request: BatchRequest;
  tokenEngine: TokenEngine | null;
}

/** The request fields that pace a stream (PROTOCOL.md "Endless streams", "Staleness"): endless and ASYNC's. */
const STREAM_ONLY = ["endless", ...(Object.keys(ASYNC) as (keyof typeof ASYNC)[])] as const;

/** Admits `frame` for `session`, or throws the RollgymError of the first check it fails. */
export function admitRollout(state: ServerState, session: Session, frame: RolloutRequest): AdmittedRollout {
  const { options, registry } = state;
  const { policy } = state.rolloutContext;
  if (state.closing) throw new RollgymError("shutting_down", {});
  // An id stays taken while its rollout runs, its batch frame is unconfirmed or any of its
  // groups is unacknowledged, so acknowledgements and resends can never mix two rollouts.
  if (session.holdsRollout(frame.id)) throw new RollgymError("rollout_id_taken", { id: frame.id });
  if (session.unacknowledgedGroups >= options.maxUnackedGroups)
    throw new RollgymError("max_unacked_groups", {
      max: options.maxUnackedGroups,
      held: session.unacknowledgedGroups,
    });
  const live = [...session.rollouts.values()].filter((r) => r.batch === null).length;
  if (live >= options.maxRolloutsPerConnection)
    throw new RollgymError("max_rollouts_per_connection", { max: options.maxRolloutsPerConnection });
  checkTags(state, frame.tags, "tags");
  const stream = frame.delivery === "stream";
  const pacing = STREAM_ONLY.find((f) => frame[f] !== undefined && frame[f] !== null && frame[f] !== false);
  if (!stream && pacing !== undefined) throw new RollgymError("needs_stream", { field: pacing }, pacing);
  if (frame.group_range) checkGroupRange(state, frame, frame.group_range);

  const request = resolveRequest(state.config, frame);
  // Configured alone it is ignored (no bound to keep); asked for, it must have one.
  if (frame.strict_staleness === true && request.pace.max_staleness === null)
    throw new RollgymError("strict_needs_staleness", {});
  // The same limits and seed range the CLI checks (src/rollout/limits.ts).
  checkRolloutShape(request, shapeOnly(options));
  // Batch delivery holds the whole batch from the start; a stream rollout holds each group
  // from just before it starts until it is acknowledged, so it needs room for one now.
  // Checked against the bytes they will be charged (a remote env's episode costs more).
  const episodes = request.tags.reduce((n, t) => n + t.groups, 0) * request.groupSize;
  const groupBytes = Math.max(
    ...request.tags.map(({ tag }) => episodesBytes(registry, [{ tag, groups: 1 }], request.groupSize)),
  );
  const over = stream
    ? budgetRefusal(state, session, request.groupSize, groupBytes, "a stream rollout's next group")
    : budgetRefusal(
        state,
        session,
        episodes,
        episodesBytes(registry, request.tags, request.groupSize),
        "this batch-delivery rollout",
      );
  if (over) throw new RollgymError("episode_budget", { message: over });

  playable(() => validateBatchRequest(request));
  if (stream && !groupLocalScores(request)) throw new RollgymError("stream_scores", {});
  const tokenEngine = request.tokens ? playable(() => policy.tokenEngine?.() ?? null) : null;
  if (request.tokens && !tokenEngine) throw new RollgymError("tokens_need_engine", { policy: policy.name });
  const why = playable(() => policyRefusal(registry, request, policy));
  if (why) throw new RollgymError("policy_cannot_play", { policy: policy.name, why });
  return { request, tokenEngine };
}

/**
 * A shard's share must be a part of the rollout every shard resolves alike: its groups go out
 * as they finish (stream), and its seeds do not depend on the server (a random train base would
 * differ per shard).
 */
function checkGroupRange(state: ServerState, frame: RolloutRequest, range: GroupRange): void {
  const refuse = (field: string, message: string) => new RollgymError("bad_frame", { message }, field);
  if (frame.delivery !== "stream")
    throw refuse(
      "group_range",
      'group_range plays a shard\'s share of a rollout: it needs delivery "stream", not "batch"',
    );
  // An endless stream's share is the same range of every window.
  const total = frame.tags.reduce((n, t) => n + t.groups, 0);
  const whose = frame.endless === true ? "a window's" : "the rollout's";
  if (range.first + range.count > total)
    throw refuse(
      range.first >= total ? "group_range.first" : "group_range.count",
      `group_range ${range.first}..${range.first + range.count - 1} passes ${whose} ${total} groups (0..${total - 1}); allowed: first + count <= ${total}`,
    );
  if (drawsRandomSeed(state, frame))
    throw refuse(
      "seed",
      "group_range needs a seed every shard agrees on, and this server draws a random train seed (seed.train null): pass seed",
    );
}

/** True when this server would draw the rollout's train seed at random (seed.train null, no seed given): no other server plays the same groups. */
export function drawsRandomSeed(state: ServerState, frame: RolloutRequest): boolean {
  return frame.seed === undefined && (frame.mode ?? "train") === "train" && state.config.seed.train === null;
}

/** An env session that passed every check: its request, and the engine of a token session. */
export interface AdmittedEnvSession {
  request: BatchRequest;
  tokens: TokenEngine | null;
}

/** Admits `frame` on a connection hosting `hosted`, or throws the RollgymError of the first check it fails. */
export function admitEnvSession(
  state: ServerState,
  session: Session,
  hosted: ReadonlyMap<string, unknown>,
  frame: EnvOpen,
): AdmittedEnvSession {
  const { options } = state;
  const { policy } = state.rolloutContext;
  if (hosted.has(frame.id)) throw new RollgymError("env_id_taken", { id: frame.id });
  if (hosted.size >= options.maxEnvSessionsPerConnection)
    throw new RollgymError("max_env_sessions_per_connection", { max: options.maxEnvSessionsPerConnection });
  checkTags(state, [frame], "tag");
  const request = resolveRequest(state.config, {
    ...frame,
    tags: [{ tag: frame.tag, groups: frame.groups }],
  });
  try {
    // An env session is bounded like a rollout, and its seeds never wrap either.
    checkRolloutShape(request, shapeOnly(options));
  } catch (error) {
    // Its groups are `groups`, not `tags`.
    if (isShapeRefusal(error) && error.field === "tags") error.field = "groups";
    throw error;
  }
  const bytes = episodesBytes(state.registry, request.tags, request.groupSize);
  const over = budgetRefusal(state, session, frame.groups * frame.group_size, bytes, "this env session");
  if (over) throw new RollgymError("episode_budget", { message: over });
  let tokens: TokenEngine | null = null;
  try {
    tokens = frame.tokens ? (policy.tokenEngine?.() ?? null) : null;
  } catch (error) {
    // The engine cannot do token mode as configured (rollgym.llm.count_tokens=usage).
    throw new RollgymError("tokens_unusable", { message: messageOf(error) });
  }
  if (frame.tokens && !tokens)
    throw new RollgymError("tokens_need_engine", { policy: policy.name }, "tokens");
  return { request, tokens };
}

/** Refuses the first of `tags` the server does not have; `field` names it in the refusal. */
function checkTags(state: ServerState, tags: readonly { tag: string }[], field: string): void {
  const unknown = tags.find((t) => !state.registry.hasTag(t.tag));
  if (unknown)
    throw new RollgymError(
      "unknown_tag",
      { message: unknownTagMessage(unknown.tag, state.registry.tagNames()) },
      field,
    );
}

/** checkRolloutShape's group and seed checks only: episodes are the budget's (budget.ts). */
function shapeOnly(options: ServerState["options"]): RolloutLimits {
  return { maxGroupsPerRollout: options.maxGroupsPerRollout, maxEpisodesInFlight: Number.POSITIVE_INFINITY };
}

/** What `check` returns, or its error as `unplayable` (a request the engine cannot run as asked). */
function playable<T>(check: () => T): T {
  try {
    return check();
  } catch (error) {
    throw new RollgymError("unplayable", { message: messageOf(error) });
  }
}
