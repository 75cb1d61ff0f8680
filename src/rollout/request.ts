// The settings a rollout runs with, from a loaded configuration (RAGEN's key names) and the
// rollout asked for: one path for `rollgym rollout` (the configuration's own rollout) and the
// server (a `rollout` or `env_open` frame). Each table's settings (protocol/settings.ts) are read
// by wire name at their configuration keys, and a frame's fields of the same names go over them,
// so a new setting is one entry in its table and nothing here.
import type { RolloutRequest } from "../../protocol/messages.ts";
import {
  ASYNC,
  EPISODE,
  FILTER,
  GROUPS_WHEN_NULL,
  type PaceValues,
  SAMPLING,
  type SamplingValues,
  type Setting,
  type SettingValues,
} from "../../protocol/settings.ts";
import { configValue, defaultConfig, effectiveFilterValue, type RollgymConfig } from "../config/index.ts";
import type { RolloutMode } from "../record/episode-record.ts";
import { type BatchRequest, trainBatchSeed } from "./batch.ts";

type EpisodeField = keyof typeof EPISODE;
type AsyncField = keyof typeof ASYNC;

/**
 * A rollout as asked for, in a `rollout` frame's words: its layout, and whatever it sets of the
 * run (mode, step, seed, token mode) and of the settings; what it leaves out is configured.
 */
export type RolloutFrame = Pick<RolloutRequest, "tags" | "group_size"> &
  Partial<
    Pick<
      RolloutRequest,
      "mode" | "step" | "seed" | "tokens" | "sampling" | "filter" | "group_range" | EpisodeField | AsyncField
    >
  >;

/**
 * The rollout the configuration asks for (what `rollgym rollout` plays): the layout of `mode`
 * (default rollgym.mode) and rollgym.step, rollgym.seed and rollgym.tokens, which only this
 * rollout reads (a server's rollouts are its clients').
 */
export function configuredFrame(
  config: RollgymConfig,
  mode: RolloutMode = config.rollgym.mode,
): RolloutFrame {
  const { env_configs, group_size } = config.es_manager[mode];
  return {
    mode,
    tags: env_configs.tags.map((tag, i) => ({ tag, groups: env_configs.n_groups[i] })),
    group_size,
    step: config.rollgym.step,
    ...(config.rollgym.seed === null ? {} : { seed: config.rollgym.seed }),
    tokens: config.rollgym.tokens,
  };
}

/**
 * The settings `frame` runs with over `config` (default: the configuration's own rollout). The
 * seed of group 0 is the frame's, else RAGEN's schedule from its step (train: seed.train + step ×
 * its groups, a random base when seed.train is null; val: seed.val), so results never depend on
 * server state.
 */
export function resolveRequest(
  config: RollgymConfig,
  frame: RolloutFrame = configuredFrame(config),
): BatchRequest {
  const mode = frame.mode ?? "train";
  const groups = frame.tags.reduce((n, t) => n + t.groups, 0);
  const agent = config.agent_proxy;
  const pace = overlay(configured(config, ASYNC), fieldsOf(frame, ASYNC));
  for (const field of GROUPS_WHEN_NULL) pace[field] ??= groups;
  return {
    mode,
    tags: frame.tags.map(({ tag, groups }) => ({ tag, groups })),
    groupSize: frame.group_size,
    seed: frame.seed ?? scheduledSeed(config, mode, frame.step ?? 0, groups),
    episode: {
      ...overlay(configured(config, EPISODE), fieldsOf(frame, EPISODE)),
      action_sep: agent.action_sep,
      context_window_mode: agent.context_window_mode,
      max_context_window: agent.max_context_window,
      format_penalty: config.es_manager.format_penalty,
      truncation: config.rollgym.context.truncation,
    },
    minResponseTokens: config.rollgym.llm.min_response_tokens,
    tokens: frame.tokens ?? false,
    sampling: overlay(configuredSampling(config, mode), frame.sampling ?? {}),
    normalization: agent.reward_normalization,
    useTurnScores: agent.use_turn_scores,
    binaryReward: config.rollgym.binary_reward,
    // rollout_filter_value null: RAGEN's legacy rollout_filter_ratio.
    filter: overlay(
      { ...configured(config, FILTER), value: effectiveFilterValue(config) },
      frame.filter ?? {},
    ),
    pace: pace as PaceValues,
    ...(frame.group_range ? { groupRange: { ...frame.group_range } } : {}),
  };
}

/** RAGEN's seed schedule: train seed.train + step × groups (a random base in [0, 1,000,000] when null), val seed.val. */
function scheduledSeed(config: RollgymConfig, mode: RolloutMode, step: number, groups: number): number {
  if (mode === "val") return config.seed.val;
  return trainBatchSeed(config.seed.train ?? Math.floor(Math.random() * 1_000_001), step, groups);
}

/** A table's settings as configured, by wire name. */
function configured<Table extends Record<string, Setting>>(
  config: RollgymConfig,
  table: Table,
): SettingValues<Table> {
  return Object.fromEntries(
    Object.entries(table).map(([name, setting]) => [name, configValue(config, setting["x-config"].key)]),
  ) as SettingValues<Table>;
}

/** The fields of a table a frame carries at its top level. */
function fieldsOf(frame: RolloutFrame, table: Record<string, Setting>): Record<string, unknown> {
  const fields = frame as Record<string, unknown>;
  return Object.fromEntries(Object.keys(table).map((name) => [name, fields[name]]));
}

/**
 * The configured sampling for `mode`: each setting from its key (val_kwargs' in val mode), a
 * null setting left out. Validation samples with val_kwargs (RAGEN: temperature 0.5);
 * do_sample false is greedy.
 */
export function configuredSampling(config: RollgymConfig, mode: RolloutMode): SamplingValues {
  const sampling: Record<string, unknown> = {};
  for (const [name, setting] of Object.entries(SAMPLING)) {
    const { key, val } = setting["x-config"];
    const value = configValue(config, mode === "val" && val ? val.key : key);
    if (value !== null) sampling[name] = value;
  }
  if (mode === "val" && !config.actor_rollout_ref.rollout.val_kwargs.do_sample) sampling.temperature = 0;
  return sampling as SamplingValues;
}

/** The frame's settings over the configured ones: an omitted field keeps its value, a null one is removed (sampling's "none"). */
function overlay<T extends object>(configured: T, given: Readonly<Record<string, unknown>>): T {
  const out = { ...configured } as Record<string, unknown>;
  for (const [name, value] of Object.entries(given)) {
    if (value === null) delete out[name];
    else if (value !== undefined) out[name] = value;
  }
  return out as T;
}

/** A batch with RAGEN's defaults (base.yaml) for `mode`, with some fields replaced. */
export function defaultBatchRequest(mode: RolloutMode, overrides: Partial<BatchRequest> = {}): BatchRequest {
  const config = defaultConfig();
  return { ...resolveRequest(config, configuredFrame(config, mode)), ...overrides };
}
