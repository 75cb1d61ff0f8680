import { rmSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ConfigError, defaultConfig, describeConfig, loadConfig } from "../../src/config/index.ts";
import { FIXTURES } from "../helpers/fixtures.ts";
import { yamlFiles } from "./yaml-files.ts";

const fixture = (name: string): string => join(FIXTURES, "config", name);
const { dir, yamlFile } = yamlFiles("config");
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function loadError(input: Parameters<typeof loadConfig>[0]): ConfigError {
  try {
    loadConfig(input);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return error as ConfigError;
  }
  throw new Error("expected a ConfigError");
}

function expectError(
  input: Parameters<typeof loadConfig>[0],
  key: string | null,
  ...fragments: string[]
): ConfigError {
  const error = loadError(input);
  expect(error.key).toBe(key);
  if (key !== null) expect(error.message).toContain(key);
  for (const fragment of fragments) expect(error.message).toContain(fragment);
  return error;
}

describe("loadConfig basics", () => {
  it("returns the defaults for no input", () => {
    expect(loadConfig({})).toEqual({
      config: defaultConfig(),
      ignored: [],
      notices: [],
      origins: {},
      dirs: {},
    });
  });

  it("applies later files over earlier ones and overrides over files", () => {
    const a = yamlFile("agent_proxy:\n  max_turn: 3\n  max_actions_per_turn: 4\n");
    const b = yamlFile("agent_proxy:\n  max_turn: 7\n");
    const { config } = loadConfig({ files: [a, b], overrides: ["agent_proxy.max_actions_per_turn=1"] });
    expect(config.agent_proxy.max_turn).toBe(7);
    expect(config.agent_proxy.max_actions_per_turn).toBe(1);
  });

  it("merges mappings key by key and replaces lists whole", () => {
    const a = yamlFile(
      "es_manager:\n  val:\n    env_groups: 4\n    env_configs:\n      tags: [A, B]\n      n_groups: [2, 2]\n",
    );
    const b = yamlFile("es_manager:\n  val:\n    env_configs:\n      tags: [C]\n      n_groups: [4]\n");
    const { config } = loadConfig({ files: [a, b] });
    expect(config.es_manager.val).toEqual({
      env_groups: 4,
      group_size: 1,
      env_configs: { tags: ["C"], n_groups: [4] },
    });
  });

  it("treats an empty file as no settings", () => {
    expect(loadConfig({ files: [yamlFile("# nothing\n")] }).config).toEqual(defaultConfig());
  });
});

describe("a pasted RAGEN config", () => {
  const loaded = loadConfig({ files: [fixture("ragen_frozen_lake.yaml")] });

  it("loads the rollout values", () => {
    const { config } = loaded;
    expect(config.es_manager.train).toEqual({
      env_groups: 8,
      group_size: 16,
      env_configs: { tags: ["CoordFrozenLake"], n_groups: [8] },
    });
    expect(config.es_manager.val.env_groups).toBe(256);
    expect(config.es_manager.val.env_configs).toEqual({ tags: ["CoordFrozenLake"], n_groups: [256] });
    expect(config.seed).toEqual({ train: 20000, val: 123 });
    expect(config.agent_proxy.enable_think).toBe(false);
    expect(config.agent_proxy.reward_normalization).toEqual({ grouping: "state", method: "mean_std" });
    const rollout = config.actor_rollout_ref.rollout;
    expect(rollout.response_length).toBe(500);
    expect(rollout.rollout_filter_value).toBe(0.9);
    expect(rollout.rollout_filter_top_p_prob_mode).toBe("softmax");
    expect(rollout.rollout_filter_metric).toBe("reward_variance"); // from reward_std
    expect(rollout.val_kwargs).toEqual({ do_sample: true, temperature: 0.5, top_p: 1.0, top_k: -1 });
    expect(config.custom_envs).toEqual({
      CoordFrozenLake: { env_config: { success_rate: 1, observation_format: "grid_coord" } },
    });
  });

  it("lists the trainer-only keys, each once, in order", () => {
    expect(loaded.ignored).toEqual([
      "system.CUDA_VISIBLE_DEVICES",
      "micro_batch_size_per_gpu",
      "ppo_mini_batch_size",
      "model_path",
      "enable_response_mask",
      "lora.rank",
      "lora.alpha",
      "actor_rollout_ref.model.path",
      "actor_rollout_ref.actor.entropy_coeff",
      "actor_rollout_ref.actor.optim.lr",
      "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
      "actor_rollout_ref.rollout.rollout_filter_empty_stop_steps",
      "critic.optim.lr",
      "algorithm.adv_estimator",
      "algorithm.kl_ctrl.type",
      "algorithm.kl_ctrl.kl_coef",
      "trainer.experiment_name",
      "trainer.total_training_steps",
      "trainer.logger",
      "collapse_detection.compute_freq",
    ]);
  });

  it("notes the Hydra keys and the RAGEN keys accepted at their defaults", () => {
    const notices = loaded.notices.join("\n");
    expect(notices).toContain("ignored top-level `defaults`");
    expect(notices).toContain("ignored top-level `hydra`");
    expect(notices).toContain("actor_rollout_ref.rollout.gpu_memory_utilization=0.3");
    expect(notices).toContain('agent_proxy.batch_adjust_mode="copy"');
    expect(notices).toContain("ctx_manager.generation.gen_config.temperature");
  });

  it("reports trainer keys seen in several sources once", () => {
    const { ignored } = loadConfig({
      files: [fixture("ragen_frozen_lake.yaml")],
      overrides: ["trainer.experiment_name=again", "optimization.kl_coef=0.001"],
    });
    expect(ignored.filter((k) => k === "trainer.experiment_name")).toHaveLength(1);
    expect(ignored.at(-1)).toBe("optimization.kl_coef");
  });
});

describe("old-era keys", () => {
  it("translate the old command line", () => {
    const { config, ignored, notices } = loadConfig({
      overrides: [
        "training.train_batch_size=4",
        "training.n_rollout=8",
        "training.max_turns=5",
        "optimization.kl_coef=0.001",
      ],
    });
    expect(config.es_manager.train).toEqual({
      env_groups: 4,
      group_size: 8,
      env_configs: { tags: ["CoordSokoban"], n_groups: [4] },
    });
    expect(config.agent_proxy.max_turn).toBe(5);
    expect(ignored).toEqual(["optimization.kl_coef"]);
    const text = notices.join("\n");
    expect(text).toContain("training.train_batch_size=4");
    expect(text).toContain("es_manager.train.env_groups=4");
    expect(text).toContain("es_manager.train.env_configs.n_groups=[4] follows");
    expect(text).toContain("es_manager.train.group_size=8");
    expect(text).toContain("agent_proxy.max_turn=5");
  });

  it("translate an old base.yaml", () => {
    const { config, ignored, notices } = loadConfig({ files: [fixture("old_sokoban.yaml")] });
    expect(config.es_manager.train).toMatchObject({ env_groups: 8, group_size: 16 });
    expect(config.actor_rollout_ref.rollout.temperature).toBe(0.7);
    expect(config.actor_rollout_ref.rollout.response_length).toBe(400);
    expect(config.agent_proxy.enable_think).toBe(true);
    expect(config.rollgym.max_obs_length).toBe(200);
    expect(config.rollgym.binary_reward).toBe(false);
    // 50 val seeds in batches of 10 → one val rollout of 50 groups.
    expect(config.es_manager.val).toEqual({
      env_groups: 50,
      group_size: 1,
      env_configs: { tags: ["CoordSokoban"], n_groups: [50] },
    });
    expect(ignored).toEqual([
      "rl_or_sft",
      "system.cuda_visible_devices",
      "system.n_gpus",
      "model.base_model",
      "model.experiment_name",
      "training.micro_batch_size",
      "training.ppo_batch_size",
      "optimization.actor_lr",
      "optimization.kl_coef",
      "optimization.gpu_memory_utilization",
    ]);
    expect(notices.join("\n")).toContain("training.max_start_length=400");
  });

  it("invert no_think_rl and map binary_reward", () => {
    const { config, notices } = loadConfig({
      overrides: ["training.no_think_rl=True", "training.binary_reward=True"],
    });
    expect(config.agent_proxy.enable_think).toBe(false);
    expect(config.rollgym.binary_reward).toBe(true);
    expect(notices.join("\n")).toContain("no code read it");
  });

  it("size validation like the old drop_last loader", () => {
    const groups = (...overrides: string[]): number =>
      loadConfig({ overrides }).config.es_manager.val.env_groups;
    expect(groups("training.val_batch_size=20")).toBe(40); // old default val_data_num 50
    expect(groups("training.val_data_num=64")).toBe(60); // old default val_batch_size 10
    expect(groups("training.val_data_num=null", "training.val_batch_size=32")).toBe(480); // 500-row test set
    expectError({ overrides: ["training.val_data_num=5"] }, "training.val_data_num", "ran no validation");
  });

  it("give way to a current key set later, and win over one set earlier", () => {
    const file = yamlFile("training:\n  max_turns: 3\n");
    const later = loadConfig({ files: [file], overrides: ["agent_proxy.max_turn=7"] });
    expect(later.config.agent_proxy.max_turn).toBe(7);
    expect(later.notices.join("\n")).toContain("training.max_turns (old RAGEN) not used");
    const earlier = yamlFile("agent_proxy:\n  max_turn: 7\n");
    expect(
      loadConfig({ files: [earlier], overrides: ["training.max_turns=3"] }).config.agent_proxy.max_turn,
    ).toBe(3);
  });

  it("conflict with a different current value in the same file", () => {
    const file = yamlFile("training:\n  max_turns: 3\nagent_proxy:\n  max_turn: 7\n");
    expectError(
      { files: [file] },
      "training.max_turns",
      "conflicts with agent_proxy.max_turn=7",
      `${file}:2`,
    );
  });

  it("name the old key when its value is bad", () => {
    const error = expectError(
      { overrides: ["training.max_turns=0"] },
      "training.max_turns",
      "an integer from 1 to 1000",
    );
    expect(error.message).toContain('override "training.max_turns=0"');
  });

  it("do not guess n_groups for several tags", () => {
    const error = expectError(
      { overrides: ["es_manager.train.env_configs.tags=[A,B]", "training.train_batch_size=4"] },
      "es_manager.train.env_configs.n_groups",
      "has 1 entry",
    );
    expect(error.message).toContain("training.train_batch_size set in");
  });
});

describe("overrides", () => {
  it("parse values as YAML like Hydra", () => {
    const { config } = loadConfig({
      overrides: [
        "es_manager.train.env_configs.tags=[CoordSokoban,FrozenLake]",
        "es_manager.train.env_configs.n_groups=[4,4]",
        "agent_proxy.enable_think=False",
        "seed.train=null",
        "+rollgym.llm.base_url=http://localhost:8000/v1",
        "++rollgym.llm.model='Qwen/Qwen2.5-3B-Instruct'",
        "agent_proxy.action_sep=||",
        "actor_rollout_ref.rollout.temperature=1e-1",
        "custom_envs.MySokoban.env_config={dim_x: 8, dim_y: 8}",
      ],
    });
    expect(config.es_manager.train.env_configs).toEqual({
      tags: ["CoordSokoban", "FrozenLake"],
      n_groups: [4, 4],
    });
    expect(config.agent_proxy.enable_think).toBe(false);
    expect(config.seed.train).toBeNull();
    expect(config.rollgym.llm.base_url).toEqual(["http://localhost:8000/v1"]);
    expect(config.rollgym.llm.model).toBe("Qwen/Qwen2.5-3B-Instruct");
    expect(config.agent_proxy.action_sep).toBe("||");
    expect(config.actor_rollout_ref.rollout.temperature).toBe(0.1);
    expect(config.custom_envs.MySokoban).toEqual({ env_config: { dim_x: 8, dim_y: 8 } });
  });

  it("delete a key with ~ so the default applies", () => {
    const file = yamlFile("agent_proxy:\n  max_turn: 3\n");
    expect(
      loadConfig({ files: [file], overrides: ["~agent_proxy.max_turn"] }).config.agent_proxy.max_turn,
    ).toBe(5);
  });

  it("reject text that is not key=value", () => {
    expectError({ overrides: ["agent_proxy.max_turn"] }, "agent_proxy.max_turn", "expected key=value");
    expectError({ overrides: ["=5"] }, null, "expected key=value");
  });

  it("never echo an API key", () => {
    const error = loadError({ overrides: ["rollgym.llm.api_key=sk-secret", "rollgym.llm.nope=1"] });
    expect(error.message).not.toContain("sk-secret");
    const bad = loadError({ overrides: ["rollgym.llm.api_key=[sk-secret]"] });
    expect(bad.key).toBe("rollgym.llm.api_key");
    expect(bad.message).toContain("api_key=***");
  });
});

describe("errors", () => {
  it("name the key, the value and what is allowed", () => {
    expectError(
      { overrides: ["agent_proxy.max_turn=0"] },
      "agent_proxy.max_turn",
      ": 0;",
      "an integer from 1 to 1000",
    );
    expectError(
      { overrides: ["agent_proxy.context_window_mode=foo"] },
      "agent_proxy.context_window_mode",
      '"foo"',
      "full, limited_multi_turn, single_turn",
    );
  });

  it("check tags against n_groups with RAGEN's meaning", () => {
    expectError(
      { overrides: ["es_manager.train.env_configs.tags=[CoordSokoban,FrozenLake]"] },
      "es_manager.train.env_configs.n_groups",
      "has 1 entry",
      "has 2",
    );
    const error = expectError(
      { overrides: ["es_manager.val.env_groups=32"] },
      "es_manager.val.env_configs.n_groups",
      "sums to 512",
      "n_groups=[32]",
    );
    expect(error.message).toContain(
      'es_manager.val.env_groups set in override "es_manager.val.env_groups=32"',
    );
  });

  it("reject unknown keys, suggesting a near one", () => {
    expectError(
      { overrides: ["agent_proxy.max_turns=5"] },
      "agent_proxy.max_turns",
      "unknown config key",
      "did you mean agent_proxy.max_turn?",
    );
    expectError(
      { overrides: ["agent_proxy.temperature=0.3"] },
      "agent_proxy.temperature",
      "did you mean actor_rollout_ref.rollout.temperature?",
    );
    const far = expectError(
      { overrides: ["completely.different=1"] },
      "completely.different",
      "unknown config key",
    );
    expect(far.message).not.toContain("did you mean");
  });

  it("reject rollout-side RAGEN keys rollgym does not support", () => {
    expectError(
      { overrides: ["agent_proxy.batch_adjust_mode=delete"] },
      "agent_proxy.batch_adjust_mode",
      "is a RAGEN key rollgym does not support",
      "trainer",
    );
    expectError(
      { overrides: ["actor_rollout_ref.rollout.do_sample=false"] },
      "actor_rollout_ref.rollout.do_sample",
      "RAGEN key rollgym does not support",
      "val_kwargs.do_sample",
      "only RAGEN's default true",
    );
    expectError(
      { overrides: ["actor_rollout_ref.rollout.ignore_eos=true"] },
      "actor_rollout_ref.rollout.ignore_eos",
      "stops at EOS",
    );
    expectError({ overrides: ["model_config.model_name=gpt-4o"] }, "model_config.model_name", "rollgym.llm.");
    expectError(
      { overrides: ["ctx_manager.generation.gen_config.temperature=0.2"] },
      "ctx_manager.generation.gen_config.temperature",
      "never reads it",
    );
    expectError(
      { overrides: ["actor_rollout_ref.rollout.rollout_filter_metric=entropy"] },
      "actor_rollout_ref.rollout.rollout_filter_metric",
      "RAGEN value rollgym does not support",
      "log-probs",
    );
    expectError({ overrides: ["env.name=sokoban"] }, "env.name", "custom_envs.<Tag>.env_config");
  });

  it("accept vLLM engine settings with a notice, as RAGEN's own _6_webshop.yaml sets one", () => {
    const file = yamlFile(
      "actor_rollout_ref:\n  rollout:\n    max_model_len: 15000\n    max_num_batched_tokens: 15000\n" +
        "    gpu_memory_utilization: 0.9\n",
    );
    const { config, ignored, notices } = loadConfig({ files: [file] });
    expect(config.actor_rollout_ref.rollout.max_model_len).toBe(15000);
    expect(ignored).toEqual([]);
    expect(notices).toEqual([
      "vLLM engine settings, no effect in rollgym (configure the server at rollgym.llm.base_url): " +
        "actor_rollout_ref.rollout.max_num_batched_tokens=15000, actor_rollout_ref.rollout.gpu_memory_utilization=0.9",
    ]);
  });

  it("accept unsupported keys at RAGEN's default as no-ops", () => {
    const { notices } = loadConfig({ overrides: ["agent_proxy.batch_adjust_mode=copy"] });
    expect(notices).toEqual([
      'accepted at RAGEN\'s default value, no effect in rollgym: agent_proxy.batch_adjust_mode="copy"',
    ]);
  });

  it("name the file and line of a YAML syntax error", () => {
    const path = fixture("bad_syntax.yaml");
    const error = expectError({ files: [path] }, null, `YAML syntax error in ${path}:3:15: Nested mappings`);
    expect(error.message).not.toContain("\n");
    expect(error.file).toBe(path);
    expect(error.line).toBe(3);
  });

  it("name the file and line of a bad value", () => {
    const path = fixture("bad_value.yaml");
    const error = expectError(
      { files: [path] },
      "agent_proxy.context_window_mode",
      '"sliding"',
      `set in ${path}:3`,
    );
    expect(error.line).toBe(3);
  });

  it("name a missing file and a file that is not a mapping", () => {
    expectError({ files: [join(dir, "missing.yaml")] }, null, "cannot read config file", "missing.yaml");
    expectError({ files: [yamlFile("- a\n- b\n")] }, null, "expected a mapping of config keys");
  });

  it("reject a group given a scalar", () => {
    expectError({ overrides: ["agent_proxy=5"] }, "agent_proxy", "allowed: a mapping of keys");
  });
});

describe("custom_envs", () => {
  it("deep-merges env_config across sources and keeps it plain data", () => {
    const a = yamlFile(
      "custom_envs:\n  CoordFrozenLake:\n    max_tokens: 80\n    env_config:\n      success_rate: 1\n      grid_lookup: {0: P}\n",
    );
    const b = yamlFile(
      'custom_envs:\n  CoordFrozenLake:\n    env_config:\n      observation_format: "grid"\n',
    );
    const { config } = loadConfig({ files: [a, b] });
    expect(config.custom_envs.CoordFrozenLake).toEqual({
      max_tokens: 80,
      env_config: { success_rate: 1, grid_lookup: { "0": "P" }, observation_format: "grid" },
    });
  });

  it("lets null reset env_config, and names unknown entry keys", () => {
    const a = yamlFile("custom_envs:\n  Mine:\n    env_config:\n      size: 4\n");
    const { config } = loadConfig({ files: [a], overrides: ["custom_envs.Mine.env_config=null"] });
    expect(config.custom_envs.Mine).toEqual({ env_config: null });
    expectError(
      { overrides: ["custom_envs.Mine.env_cfg={size: 4}"] },
      "custom_envs.Mine.env_cfg",
      "did you mean custom_envs.Mine.env_config?",
    );
    expectError(
      { overrides: ["custom_envs.Mine.max_workers=0"] },
      "custom_envs.Mine.max_workers",
      "an integer >= 1",
    );
  });
});

describe("RAGEN details", () => {
  it("resolve OmegaConf interpolations of rollgym keys", () => {
    const file = yamlFile(
      `actor_rollout_ref:\n  rollout:\n    response_length: 256\n    max_model_len: \${actor_rollout_ref.rollout.response_length}\n`,
    );
    expect(loadConfig({ files: [file] }).config.actor_rollout_ref.rollout.max_model_len).toBe(256);
    expectError({ overrides: [`rollgym.llm.api_key=\${oc.env:KEY}`] }, "rollgym.llm.api_key", "resolvers");
  });

  it("translate RAGEN V1's std filter", () => {
    const { config, notices } = loadConfig({
      overrides: [
        "actor_rollout_ref.rollout.rollout_filter_type=std",
        "actor_rollout_ref.rollout.rollout_filter_ratio=0.5",
      ],
    });
    expect(config.actor_rollout_ref.rollout).toMatchObject({
      rollout_filter_strategy: "top_k",
      rollout_filter_type: "largest",
      rollout_filter_metric: "reward_variance",
      rollout_filter_value: 0.5,
    });
    expect(notices.join("\n")).toContain("RAGEN V1");
    // Pasted over a current base.yaml, the V1 file wins; in one source the two eras conflict.
    const base = yamlFile(
      "actor_rollout_ref:\n  rollout:\n    rollout_filter_value: 1.0\n    rollout_filter_strategy: top_p\n",
    );
    const v1 = yamlFile(
      "actor_rollout_ref:\n  rollout:\n    rollout_filter_ratio: 0.25\n    rollout_filter_type: std_rev\n",
    );
    expect(loadConfig({ files: [base, v1] }).config.actor_rollout_ref.rollout).toMatchObject({
      rollout_filter_strategy: "top_k",
      rollout_filter_type: "smallest",
      rollout_filter_value: 0.25,
    });
    expectError({ files: [v1, base] }, "actor_rollout_ref.rollout.rollout_filter_type", "RAGEN V1");
  });

  it("keep rollout_filter_ratio dead while rollout_filter_value is set, as RAGEN does", () => {
    const dead = loadConfig({ overrides: ["actor_rollout_ref.rollout.rollout_filter_ratio=0.5"] });
    expect(dead.config.actor_rollout_ref.rollout.rollout_filter_value).toBe(1.0);
    expect(dead.notices.join("\n")).toContain("has no effect");
    const live = loadConfig({
      overrides: [
        "actor_rollout_ref.rollout.rollout_filter_ratio=0.5",
        "actor_rollout_ref.rollout.rollout_filter_value=null",
      ],
    });
    expect(live.config.actor_rollout_ref.rollout.rollout_filter_value).toBeNull();
  });

  it("ignore rollout.n with a notice, and default a null val seed to 123", () => {
    const { config, ignored, notices } = loadConfig({
      overrides: ["actor_rollout_ref.rollout.n=8", "seed.val=null"],
    });
    expect(ignored).toEqual(["actor_rollout_ref.rollout.n"]);
    expect(config.seed.val).toBe(123);
    expect(notices.join("\n")).toContain("group_size");
  });

  it("note a context window that full mode ignores", () => {
    const { notices } = loadConfig({ overrides: ["agent_proxy.max_context_window=5"] });
    expect(notices.join("\n")).toContain("no effect");
  });
});

describe("describeConfig", () => {
  it("round-trips through loadConfig and hides the API key", () => {
    const { config } = loadConfig({
      files: [fixture("ragen_frozen_lake.yaml")],
      overrides: ["rollgym.llm.api_key=sk-secret"],
    });
    const text = describeConfig(config);
    expect(text).not.toContain("sk-secret");
    const again = loadConfig({ files: [yamlFile(text)], overrides: ["rollgym.llm.api_key=sk-secret"] });
    expect(again.config).toEqual(config);
    expect(again.ignored).toEqual([]);
  });
});
