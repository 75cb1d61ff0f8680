// The registry a config describes: custom_envs merged into the tags they name (as Hydra merges
// RAGEN's envs.yaml), new tags, plugins; errors with the full key and where it was set.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import { buildRegistry } from "../../src/cli/build-registry.ts";
import { ConfigError, loadConfig, originOf } from "../../src/config/index.ts";
import { FIXTURES } from "../helpers/fixtures.ts";
import { yamlFiles } from "./yaml-files.ts";

const { dir, yamlFile } = yamlFiles("registry");

async function registryError(files: string[], overrides: string[] = []): Promise<ConfigError> {
  const loaded = loadConfig({ files, overrides });
  try {
    await buildRegistry(loaded.config, { origins: loaded.origins });
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return error as ConfigError;
  }
  throw new Error("expected a ConfigError");
}

describe("custom_envs in the registry", () => {
  it("merges RAGEN's _3_frozen_lake.yaml tweak into CoordFrozenLake instead of replacing it", async () => {
    const { config, origins } = loadConfig({ files: [join(FIXTURES, "config", "ragen_frozen_lake.yaml")] });
    const registry = await buildRegistry(config, { origins });
    const base = createRegistry().tag("CoordFrozenLake");
    const tag = registry.tag("CoordFrozenLake");
    expect(tag.spec).toMatchObject({
      env_type: "frozen_lake",
      max_actions_per_traj: base.spec.max_actions_per_traj,
      env_instruction: base.spec.env_instruction,
    });
    expect(tag.config).toEqual({ ...base.config, success_rate: 1 });
  });

  it("merges at every depth, across files and overrides, later winning; null resets env_config", async () => {
    const a = yamlFile(
      "custom_envs:\n  LargerSokoban:\n    max_tokens: 80\n    env_config:\n      num_boxes: 1\n",
    );
    const b = yamlFile("custom_envs:\n  LargerSokoban:\n    env_config:\n      search_depth: 20\n");
    const { config } = loadConfig({
      files: [a, b],
      overrides: ["custom_envs.LargerSokoban.env_config.num_boxes=3"],
    });
    const tag = (await buildRegistry(config)).tag("LargerSokoban");
    expect(tag.spec).toMatchObject({ max_tokens: 80, max_actions_per_traj: 10, env_type: "sokoban" });
    expect(tag.config).toMatchObject({ dim_room: [8, 8], num_boxes: 3, search_depth: 20 });
    const reset = loadConfig({ files: [a], overrides: ["custom_envs.LargerSokoban.env_config=null"] });
    expect((await buildRegistry(reset.config)).tag("LargerSokoban").config).toEqual(
      createRegistry().envType("sokoban")!.resolveConfig({}),
    );
  });

  it("~key forgets what a file set", () => {
    const a = yamlFile("agent_proxy:\n  max_turn: 2\ncustom_envs:\n  Bandit:\n    max_tokens: 7\n");
    const { config } = loadConfig({
      files: [a],
      overrides: ["~agent_proxy.max_turn", "~custom_envs.Bandit"],
    });
    expect(config.agent_proxy.max_turn).toBe(5);
    expect(config.custom_envs).toEqual({});
  });

  it("adds new tags, and names what a new tag lacks with its file:line", async () => {
    const ok = yamlFile(
      "custom_envs:\n  Tiny:\n    env_type: bandit\n    max_actions_per_traj: 1\n    env_instruction: pull\n    max_tokens: 9\n",
    );
    expect((await buildRegistry(loadConfig({ files: [ok] }).config)).tag("Tiny").spec.env_type).toBe(
      "bandit",
    );
    const partial = yamlFile("seed:\n  val: 1\ncustom_envs:\n  Tiny:\n    env_type: bandit\n");
    const error = await registryError([partial]);
    expect(error.key).toBe("custom_envs.Tiny.max_actions_per_traj");
    expect(error.message).toContain("missing: max_actions_per_traj, env_instruction, max_tokens");
    expect(error.message).toContain(`(set in ${partial}:4)`);
  });

  it("names the full key and its origin for env_config and env_type errors", async () => {
    const file = yamlFile("custom_envs:\n  CoordFrozenLake:\n    env_config:\n      success_rate: 2\n");
    const error = await registryError([file]);
    expect(error.key).toBe("custom_envs.CoordFrozenLake.env_config.success_rate");
    expect(error.message).toBe(
      `custom_envs.CoordFrozenLake.env_config.success_rate: 2 is not a number in [0, 1] (set in ${file}:4)`,
    );
    const type = await registryError([], ["custom_envs.Bandit.env_type=slots"]);
    expect(type.key).toBe("custom_envs.Bandit.env_type");
    expect(type.message).toContain(
      '"slots" is not a registered env type (sokoban, frozen_lake, bandit, openenv)',
    );
    expect(type.message).toContain('set in override "custom_envs.Bandit.env_type=slots"');
  });

  it("loads plugins from the config and from options; registering a type twice is named", async () => {
    // A config file's paths start at its directory; --plugin's and key=value's at the current one.
    const example = pathToFileURL(join(import.meta.dirname, "../../examples/number-line.ts")).href;
    writeFileSync(join(dir, "my-env.ts"), `export { register } from ${JSON.stringify(example)};\n`);
    const file = yamlFile("rollgym:\n  plugins: [./my-env.ts]\n");
    const { config, origins, dirs } = loadConfig({ files: [file] });
    expect(dirs["rollgym.plugins"]).toBe(dir);
    expect((await buildRegistry(config, { origins, dirs })).hasTag("NumberLine")).toBe(true);
    await expect(buildRegistry(config, { origins })).rejects.toThrow(
      `rollgym.plugins (set in ${file}:2): "./my-env.ts" cannot be loaded`,
    );
    await expect(
      buildRegistry(config, {
        origins,
        dirs,
        plugins: [{ module: "examples/number-line.ts", from: "--plugin" }],
      }),
    ).rejects.toThrow(
      /--plugin: "examples\/number-line.ts" failed to register its envs: env type number_line is already registered/,
    );
    const overridden = loadConfig({
      files: [file],
      overrides: ["rollgym.plugins=[examples/number-line.ts]"],
    });
    expect(overridden.dirs).not.toHaveProperty(["rollgym.plugins"]);
    const registry = await buildRegistry(overridden.config, {
      origins: overridden.origins,
      dirs: overridden.dirs,
    });
    expect(registry.hasTag("NumberLine")).toBe(true);
  });
});

describe("origins", () => {
  it("say where each set key, and each mapping above one, was set", () => {
    const file = yamlFile("agent_proxy:\n  max_turn: 3\n  reward_normalization:\n    method: mean\n");
    const { origins } = loadConfig({ files: [file], overrides: ["seed.val=4"] });
    expect(origins).toEqual({
      "agent_proxy.max_turn": `${file}:2`,
      agent_proxy: `${file}:1`,
      "agent_proxy.reward_normalization.method": `${file}:4`,
      "agent_proxy.reward_normalization": `${file}:3`,
      "seed.val": 'override "seed.val=4"',
      seed: 'override "seed.val=4"',
    });
    expect(originOf(origins, "agent_proxy.reward_normalization.grouping")).toBe(`${file}:3`);
    expect(originOf(origins, "es_manager.train")).toBeUndefined();
  });
});
