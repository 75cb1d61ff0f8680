// From a loaded configuration (RAGEN's key names) to a batch request: which tags and groups,
// the seed schedule, sampling for the mode, episode settings and the filter.
import { SAMPLING, type SamplingValues } from "../../protocol/settings.ts";
import { configValue, defaultConfig, type RollgymConfig } from "../config/index.ts";
import type { RolloutMode } from "../record/episode-record.ts";
import { type BatchRequest, trainBatchSeed } from "./batch.ts";
import type { FilterConfig } from "./filter.ts";

/** The seed of group 0: explicit, or RAGEN's schedule (train: base + step × groups; val: base). */
export function batchSeed(
  config: RollgymConfig,
  mode: RolloutMode,
  random: () => number = Math.random,
): number {
  if (config.rollgym.seed !== null) return config.rollgym.seed;
  if (mode === "val") return config.seed.val;
  const groups = config.es_manager.train.env_groups;
  // RAGEN draws a random base in [0, 1,000,000] when seed.train is null.
  const base = config.seed.train ?? Math.floor(random() * 1_000_001);
  return trainBatchSeed(base, config.rollgym.step, groups);
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

export function batchRequest(config: RollgymConfig, mode: RolloutMode = config.rollgym.mode): BatchRequest {
  const groups = config.es_manager[mode];
  const agent = config.agent_proxy;
  const rollout = config.actor_rollout_ref.rollout;
  const filter: FilterConfig = {
    metric: rollout.rollout_filter_metric,
    strategy: rollout.rollout_filter_strategy,
    value: rollout.rollout_filter_value ?? rollout.rollout_filter_ratio,
    topPMode: rollout.rollout_filter_top_p_prob_mode,
    type: rollout.rollout_filter_type,
    includeZero: rollout.rollout_filter_include_zero,
    selectionEps: rollout.rollout_filter_selection_eps,
  };
  return {
    mode,
    tags: groups.env_configs.tags.map((tag, i) => ({ tag, groups: groups.env_configs.n_groups[i] })),
    groupSize: groups.group_size,
    seed: batchSeed(config, mode),
    episode: {
      maxTurn: agent.max_turn,
      maxActionsPerTurn: agent.max_actions_per_turn,
      actionSep: agent.action_sep,
      think: agent.enable_think,
      contextWindowMode: agent.context_window_mode,
      maxContextWindow: agent.max_context_window,
      formatPenalty: config.es_manager.format_penalty,
      truncation: config.rollgym.context.truncation,
    },
    minResponseTokens: config.rollgym.llm.min_response_tokens,
    tokens: config.rollgym.tokens,
    sampling: configuredSampling(config, mode),
    normalization: agent.reward_normalization,
    useTurnScores: agent.use_turn_scores,
    binaryReward: config.rollgym.binary_reward,
    filter,
  };
}

/** A batch with RAGEN's defaults (base.yaml) for `mode`, with some fields replaced. */
export function defaultBatchRequest(mode: RolloutMode, overrides: Partial<BatchRequest> = {}): BatchRequest {
  return { ...batchRequest(defaultConfig(), mode), ...overrides };
}
