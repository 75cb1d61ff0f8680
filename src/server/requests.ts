// Protocol requests → the engine's batch requests, over the server's configuration: omitted
// fields take the configured (RAGEN default) values, and the seed follows RAGEN's schedule
// from the request's step, so results never depend on server state.
import type { EnvOpen, RolloutRequest } from "../../protocol/messages.ts";
import type { RollgymConfig } from "../config/index.ts";
import { type BatchRequest, trainBatchSeed } from "../rollout/batch.ts";
import { batchRequest } from "../rollout/request.ts";
import type { PaceSettings } from "./pacing.ts";

type Shape = Partial<
  Pick<RolloutRequest, "mode" | "step" | "seed" | "max_turn" | "max_actions_per_turn" | "think">
> & {
  tags: readonly { tag: string; groups: number }[];
  group_size: number;
};

function shaped(config: RollgymConfig, frame: Shape): BatchRequest {
  const mode = frame.mode ?? "train";
  const base = batchRequest({ ...config, rollgym: { ...config.rollgym, seed: null } }, mode);
  const groups = frame.tags.reduce((n, t) => n + t.groups, 0);
  const seed =
    frame.seed ??
    (mode === "val"
      ? config.seed.val
      : trainBatchSeed(config.seed.train ?? base.seed, frame.step ?? 0, groups));
  return {
    ...base,
    tags: frame.tags.map(({ tag, groups }) => ({ tag, groups })),
    groupSize: frame.group_size,
    seed,
    episode: {
      ...base.episode,
      maxTurn: frame.max_turn ?? base.episode.maxTurn,
      maxActionsPerTurn: frame.max_actions_per_turn ?? base.episode.maxActionsPerTurn,
      think: frame.think ?? base.episode.think,
    },
  };
}

export function rolloutBatchRequest(config: RollgymConfig, frame: RolloutRequest): BatchRequest {
  const request = shaped(config, frame);
  const s = frame.sampling ?? {};
  const f = frame.filter ?? {};
  return {
    ...request,
    sampling: overlay(request.sampling, s),
    tokens: frame.tokens ?? false,
    filter: {
      ...request.filter,
      strategy: f.strategy ?? request.filter.strategy,
      value: f.value ?? request.filter.value,
      topPMode: f.top_p_mode ?? request.filter.topPMode,
      type: f.type ?? request.filter.type,
      includeZero: f.include_zero ?? request.filter.includeZero,
      metric: f.metric ?? request.filter.metric,
    },
  };
}

/** The request's settings over the configured ones: an omitted field keeps its value, a null one is removed. */
function overlay<T extends object>(configured: T, given: Readonly<Record<string, unknown>>): T {
  const out: Record<string, unknown> = { ...(configured as Record<string, unknown>) };
  for (const [name, value] of Object.entries(given)) {
    if (value === null) delete out[name];
    else if (value !== undefined) out[name] = value;
  }
  return out as T;
}

export function envOpenRequest(config: RollgymConfig, frame: EnvOpen): BatchRequest {
  return shaped(config, { ...frame, tags: [{ tag: frame.tag, groups: frame.groups }] });
}

/** How a stream rollout paces itself (pacing.ts): the request's async fields over `rollgym.async.*`. */
export function paceSettings(config: RollgymConfig, frame: RolloutRequest): PaceSettings {
  const configured = config.rollgym.async;
  const groups = frame.tags.reduce((n, t) => n + t.groups, 0);
  const pick = <K extends keyof typeof configured>(key: K) =>
    frame[key] !== undefined ? frame[key] : configured[key];
  return {
    inFlight: pick("in_flight") ?? groups,
    maxStaleness: pick("max_staleness") ?? null,
    groupsPerStep: pick("groups_per_step") ?? groups,
    dropOlderThan: pick("drop_older_than") ?? null,
  };
}
