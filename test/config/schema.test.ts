import { describe, expect, it } from "vitest";
import {
  ConfigError,
  checkField,
  defaultConfig,
  effectiveFilterValue,
  FIELD_SPECS,
  type RollgymConfig,
  validateConfig,
} from "../../src/config/schema.ts";

function leaves(value: unknown, prefix = ""): string[] {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return [prefix];
  return Object.entries(value).flatMap(([k, v]) => leaves(v, prefix ? `${prefix}.${k}` : k));
}

function expectConfigError(fn: () => unknown, key: string, ...fragments: string[]): ConfigError {
  let caught: unknown;
  try {
    fn();
  } catch (error) {
    caught = error;
  }
  expect(caught).toBeInstanceOf(ConfigError);
  const error = caught as ConfigError;
  expect(error.key).toBe(key);
  expect(error.message).toContain(key);
  for (const fragment of fragments) expect(error.message).toContain(fragment);
  return error;
}

describe("defaults", () => {
  it("equal RAGEN's config/base.yaml values", () => {
    // Hard-coded from mll-lab-nu/RAGEN config/base.yaml@20daedc (2026-04-14); top_p/top_k and
    // val_kwargs.top_p/top_k come from verl's ppo_trainer.yaml, which base.yaml inherits;
    // rollout_filter_ratio 0.25 is the fallback in RAGEN's agent_trainer.py; min_p 0 is vLLM's.
    const c = defaultConfig();
    expect(c.es_manager).toEqual({
      format_penalty: -0.1,
      train: { env_groups: 8, group_size: 16, env_configs: { tags: ["CoordSokoban"], n_groups: [8] } },
      val: { env_groups: 512, group_size: 1, env_configs: { tags: ["CoordSokoban"], n_groups: [512] } },
    });
    expect(c.seed).toEqual({ train: 10000, val: 123 });
    expect(c.agent_proxy).toEqual({
      max_turn: 5,
      max_actions_per_turn: 2,
      action_sep: "||",
      enable_think: true,
      context_window_mode: "full",
      max_context_window: -1,
      use_turn_scores: false,
      reward_normalization: { grouping: "state", method: "identity" },
    });
    expect(c.actor_rollout_ref.rollout).toEqual({
      temperature: 1,
      top_p: 1.0,
      top_k: -1,
      min_p: 0,
      response_length: 400,
      // RAGEN's base.yaml says 3600; rollgym asks the engine unless a config sets it.
      max_model_len: "auto",
      val_kwargs: { do_sample: true, temperature: 0.5, top_p: 1.0, top_k: -1 },
      rollout_filter_strategy: "top_p",
      rollout_filter_value: 1.0,
      rollout_filter_ratio: 0.25,
      rollout_filter_top_p_prob_mode: "linear",
      rollout_filter_type: "largest",
      rollout_filter_include_zero: true,
      rollout_filter_metric: "reward_variance",
      rollout_filter_selection_eps: 0.01,
      gradient_analysis_num_buckets: 6,
      gradient_analysis_bucket_mode: "quantile",
    });
    expect(c.custom_envs).toEqual({});
  });

  it("have rollgym's own defaults", () => {
    expect(defaultConfig().rollgym).toEqual({
      mode: "train",
      llm: {
        base_url: null,
        api_key: null,
        model: null,
        cache_salt: "version",
        pause_clear_cache: false,
        concurrency: 256,
        timeout_s: 120,
        retry_budget_s: 300,
        max_retries: null,
        repetition_penalty: 1,
        presence_penalty: 0,
        frequency_penalty: 0,
        logit_bias: null,
        extra_body: null,
        grammar: null,
        dialect: "auto",
        min_response_tokens: 32,
        prefill: "continue",
        count_tokens: "engine",
        request_seeds: true,
      },
      context: { truncation: "turns" },
      policy: { name: "oracle", noise: 0, malformed: 0 },
      step: 0,
      seed: null,
      tokens: false,
      async: {
        max_staleness: null,
        groups_per_step: null,
        drop_older_than: null,
        in_flight: null,
        strict_staleness: false,
      },
      binary_reward: false,
      max_obs_length: null,
      plugins: [],
      limits: { max_groups_per_rollout: 4096, max_episodes_in_flight: 65_536, group_concurrency: 64 },
      // Every limit of serve (LIMITS), in seconds where its name ends in _s; null: computed.
      server: expect.objectContaining({
        max_frame_bytes: 1 << 20,
        max_held_bytes: null,
        send_pause_bytes: 8 << 20,
        resume_grace_s: 60,
        max_update_s: 600,
        max_upload_bytes: 32 << 20,
      }),
    });
  });

  it("are a fresh copy each time", () => {
    const a = defaultConfig();
    a.es_manager.train.env_configs.tags.push("FrozenLake");
    a.agent_proxy.max_turn = 9;
    expect(defaultConfig().es_manager.train.env_configs.tags).toEqual(["CoordSokoban"]);
    expect(defaultConfig().agent_proxy.max_turn).toBe(5);
  });

  it("give every key a spec, and every spec a default", () => {
    const keys = leaves(defaultConfig()).filter((k) => k !== "custom_envs");
    expect(keys.sort()).toEqual(Object.keys(FIELD_SPECS).sort());
  });

  it("validate unchanged", () => {
    expect(validateConfig(defaultConfig())).toEqual(defaultConfig());
  });
});

describe("checkField", () => {
  it("names the key, the value and what is allowed", () => {
    expectConfigError(
      () => checkField("agent_proxy.max_turn", FIELD_SPECS["agent_proxy.max_turn"], 0),
      "agent_proxy.max_turn",
      "0",
      "an integer from 1 to 1000",
    );
    expectConfigError(
      () => checkField("rollgym.policy.noise", FIELD_SPECS["rollgym.policy.noise"], 1.5),
      "rollgym.policy.noise",
      "1.5",
      ">= 0 and <= 1",
    );
    expectConfigError(
      () =>
        checkField(
          "agent_proxy.context_window_mode",
          FIELD_SPECS["agent_proxy.context_window_mode"],
          "sliding",
        ),
      "agent_proxy.context_window_mode",
      '"sliding"',
      "full, limited_multi_turn, single_turn",
    );
  });

  it("rejects wrong types, including numbers written as strings", () => {
    const spec = FIELD_SPECS["actor_rollout_ref.rollout.response_length"];
    expect(() => checkField("k", spec, "400")).toThrow(ConfigError);
    expect(() => checkField("k", spec, 400.5)).toThrow(ConfigError);
    expect(() => checkField("k", FIELD_SPECS["agent_proxy.enable_think"], "yes")).toThrow(ConfigError);
    expect(() => checkField("k", FIELD_SPECS["es_manager.format_penalty"], Number.NaN)).toThrow(ConfigError);
    expect(() => checkField("k", FIELD_SPECS["es_manager.format_penalty"], null)).toThrow(ConfigError);
  });

  it("knows RAGEN's special values", () => {
    const window = FIELD_SPECS["agent_proxy.max_context_window"];
    expect(checkField("k", window, -1)).toBe(-1);
    expect(checkField("k", window, 5)).toBe(5);
    expect(() => checkField("k", window, 0)).toThrow(/except 0/);
    expect(checkField("k", FIELD_SPECS["seed.train"], null)).toBeNull();
    expect(() => checkField("k", FIELD_SPECS["seed.train"], -1)).toThrow(ConfigError);
    expect(() => checkField("k", FIELD_SPECS["seed.train"], 2 ** 32)).toThrow(ConfigError);
    expect(() => checkField("k", FIELD_SPECS["actor_rollout_ref.rollout.top_p"], 0)).toThrow(/> 0/);
    expect(checkField("k", FIELD_SPECS["actor_rollout_ref.rollout.top_k"], -1)).toBe(-1);
  });

  it("resolves the reward_std alias", () => {
    const spec = FIELD_SPECS["actor_rollout_ref.rollout.rollout_filter_metric"];
    expect(checkField("k", spec, "reward_std")).toBe("reward_variance");
    expect(() => checkField("k", spec, "entropy")).toThrow(/reward_std \(= reward_variance\)/);
  });

  it("checks URLs and tag lists", () => {
    const url = FIELD_SPECS["rollgym.llm.base_url"];
    expect(checkField("k", url, "http://localhost:8000/v1")).toEqual(["http://localhost:8000/v1"]);
    expect(checkField("k", url, "http://a:1/v1,http://b:2/v1")).toEqual(["http://a:1/v1", "http://b:2/v1"]);
    expect(checkField("k", url, ["http://a:1/v1", "http://b:2/v1"])).toEqual([
      "http://a:1/v1",
      "http://b:2/v1",
    ]);
    expect(() => checkField("k", url, "localhost:8000")).toThrow(/http\(s\) URL/);
    expect(() => checkField("k", url, "http://a:1/v1,http://a:1/v1")).toThrow(/comma-separated/);
    expect(() => checkField("k", url, [])).toThrow(ConfigError);
    const len = FIELD_SPECS["actor_rollout_ref.rollout.max_model_len"];
    expect(checkField("k", len, "auto")).toBe("auto");
    expect(() => checkField("k", len, "big")).toThrow(/an integer >= 1, or auto/);
    const tags = FIELD_SPECS["es_manager.train.env_configs.tags"];
    expect(() => checkField("k", tags, [])).toThrow(ConfigError);
    expect(() => checkField("k", tags, "CoordSokoban")).toThrow(ConfigError);
    expect(() => checkField("k", FIELD_SPECS["es_manager.val.env_configs.n_groups"], [1, -1])).toThrow(
      ConfigError,
    );
  });
});

describe("validateConfig", () => {
  const withTrain = (tags: string[], n_groups: number[], env_groups: number): RollgymConfig => {
    const c = defaultConfig();
    c.es_manager.train = { env_groups, group_size: 4, env_configs: { tags, n_groups } };
    return c;
  };

  it("accepts several tags whose n_groups sum to env_groups", () => {
    const c = validateConfig(withTrain(["Bandit", "BanditTest"], [3, 5], 8));
    expect(c.es_manager.train.env_configs.n_groups).toEqual([3, 5]);
  });

  it("checks sum(n_groups) == env_groups with RAGEN's meaning", () => {
    expectConfigError(
      () => validateConfig(withTrain(["CoordSokoban"], [8], 4)),
      "es_manager.train.env_configs.n_groups",
      "sums to 8",
      "es_manager.train.env_groups is 4",
      "sum(n_groups) == env_groups",
      "n_groups=[4]",
    );
  });

  it("checks len(tags) == len(n_groups)", () => {
    expectConfigError(
      () => validateConfig(withTrain(["Bandit", "BanditTest"], [8], 8)),
      "es_manager.train.env_configs.n_groups",
      "has 1 entry",
      '["Bandit","BanditTest"] has 2',
    );
  });

  it("checks custom_envs entries", () => {
    const c = defaultConfig();
    c.custom_envs.Mine = { env_type: "sokoban", max_actions_per_traj: 0 };
    expectConfigError(() => validateConfig(c), "custom_envs.Mine.max_actions_per_traj", "an integer >= 1");
    const d = defaultConfig();
    (d.custom_envs as Record<string, unknown>).Mine = { env_typo: "sokoban" };
    expectConfigError(() => validateConfig(d), "custom_envs.Mine.env_typo", "unknown config key");
  });

  it("does not modify its input", () => {
    const c = defaultConfig();
    c.actor_rollout_ref.rollout.rollout_filter_metric = "reward_std" as never;
    const out = validateConfig(c);
    expect(out.actor_rollout_ref.rollout.rollout_filter_metric).toBe("reward_variance");
    expect(c.actor_rollout_ref.rollout.rollout_filter_metric).toBe("reward_std");
  });
});

describe("effectiveFilterValue", () => {
  it("uses rollout_filter_value, else the legacy ratio", () => {
    const c = defaultConfig();
    expect(effectiveFilterValue(c)).toBe(1.0);
    c.actor_rollout_ref.rollout.rollout_filter_value = null;
    expect(effectiveFilterValue(c)).toBe(0.25);
  });
});
