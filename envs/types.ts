// The environment contract shared by every env family. Gymnasium-shaped: reset(seed) and
// step(action) return plain values; the action budget of a tag lives in the catalogue, not here.

export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

export interface StepInfo {
  success: boolean;
  action_is_effective: boolean;
  action_is_valid: boolean;
  /** Further numeric or boolean facts; numeric ones become metrics. */
  [key: string]: number | boolean;
}

export interface StepResult {
  observation: string;
  /** RAGEN's reward for this action, as a double. */
  reward: number;
  /** The episode reached a goal or failure state (box solved, hole, goal, arm pulled). */
  terminated: boolean;
  /** The env's own step limit ran out (gym_sokoban's max_steps); RAGEN treats it as done. */
  truncated: boolean;
  info: StepInfo;
}

/**
 * One live episode of an environment. Action ids are 1-based as in RAGEN: id i names
 * `actionNames[i - 1]`. Environments are synchronous, deterministic functions of the seed.
 */
export interface Env {
  reset(seed: number): string;
  step(action: number): StepResult;
  render(): string;
  /** Names of the actions of the current episode (Bandit's arm names change per reset). */
  readonly actionNames: readonly string[];
  readonly done: boolean;
  /** A JSON snapshot from which `restore` continues the episode exactly. */
  snapshot(): JsonValue;
  restore(snapshot: JsonValue): void;
}

export interface Solution {
  /** A shortest list of action names, or null when the solver finds none. */
  actions: string[] | null;
  /** Probability that an optimal policy succeeds within the budget, for stochastic envs. */
  successProbability?: number;
}

/** Wording an env family contributes to the system prompt. */
export interface PromptVocabulary {
  /** Symbol → meaning, printed as "k: v, k: v" when the observation is a grid. */
  gridVocab: Record<string, string> | null;
  /** The action list printed in the prompt; null when the env has none (Bandit). */
  actionNames: readonly string[] | null;
}

/** An env family (RAGEN's env_type): its config schema, factory and helpers. */
export interface EnvType<Config> {
  readonly name: string;
  readonly description: string;
  /** RAGEN's config dataclass defaults. */
  defaults(): Config;
  /** Merge user keys over the defaults; throws EnvConfigError naming a bad key. */
  resolveConfig(overrides: Record<string, unknown>): Config;
  create(config: Config): Env;
  /** Rewards are Python ints (FrozenLake); matters for how reward text prints. */
  readonly integerRewards: boolean;
  /** The vocabulary the tag's own config defines. */
  vocabulary(config: Config): PromptVocabulary;
  /** Solve the episode from its current state; `budget` is the tag's action budget. */
  solve?(env: Env, budget: number): Solution;
}

export class EnvConfigError extends Error {
  /** rollgym's error catalogue code (src/errors/catalogue.ts): a mistake in the input. */
  readonly code = "env_config";
  readonly field: string;
  constructor(field: string, message: string) {
    super(`${field}: ${message}`);
    this.name = "EnvConfigError";
    this.field = field;
  }
}

export class EnvUsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "EnvUsageError";
  }
}
