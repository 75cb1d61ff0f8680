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

/** A value now, or later (a promise of it). */
export type Awaitable<T> = T | Promise<T>;

/**
 * One live episode of an environment, the contract every rollout plays. An in-process env
 * (`Env`) answers reset and step at once; an env in another process (env_type openenv) answers
 * with promises, which callers await only when they get one, so in-process envs pay nothing for
 * it. Action ids are 1-based as in RAGEN: id i names `actionNames[i - 1]`; an env with
 * `textActions` has no fixed list and takes each parsed answer as text instead.
 */
export interface AsyncEnv {
  reset(seed: number): Awaitable<string>;
  step(action: number | string): Awaitable<StepResult>;
  /** The current observation, known without asking (a remote env keeps its last one). */
  render(): string;
  /** Names of the actions of the current episode (Bandit's arm names change per reset). */
  readonly actionNames: readonly string[];
  /** The episode takes free-text actions: step gets each parsed action as a string. */
  readonly textActions?: boolean;
  readonly done: boolean;
  /** A JSON snapshot from which `restore` continues the episode exactly (when the env has them). */
  snapshot?(): JsonValue;
  restore?(snapshot: JsonValue): void;
  /** Releases what the episode holds (a remote session); nothing is called on the env after it. */
  close?(): void;
}

/**
 * Counts bytes an env received from outside against whoever holds the episode (the server's
 * memory budget), for as long as the episode is held.
 */
export type ChargeBytes = (bytes: number) => void;

/** An in-process environment: synchronous, a deterministic function of the seed, with snapshots. */
export interface Env extends AsyncEnv {
  reset(seed: number): string;
  step(action: number): StepResult;
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
  /**
   * Envs of this type answer through promises (they run in another process): `open` replaces
   * `create`, and callers that step synchronously (envs play, the web page) refuse the type.
   * `charge` hears the bytes of every answer as it arrives, before it is parsed (ChargeBytes).
   */
  open?(config: Config, charge?: ChargeBytes): AsyncEnv;
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
