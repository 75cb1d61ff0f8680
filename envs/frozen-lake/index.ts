// The `frozen_lake` env type: RAGEN's FrozenLakeEnvConfig defaults, validation and solvers.
import { integerIn, numberIn, oneOf, overlayConfig, stringMap } from "../config.ts";
import type { Env, EnvType } from "../types.ts";
import { type FrozenLakeConfig, FrozenLakeEnv } from "./frozen-lake-env.ts";
import { shortestPath, successProbability } from "./frozen-lake-solver.ts";

export { type FrozenLakeConfig, FrozenLakeEnv } from "./frozen-lake-env.ts";
export { generateMap } from "./map.ts";

function defaults(): FrozenLakeConfig {
  return {
    size: 4,
    p: 0.9,
    success_rate: 0.8,
    is_slippery: true,
    render_mode: "text",
    observation_format: "grid",
    grid_lookup: { 0: "P", 1: "_", 2: "O", 3: "G", 4: "X", 5: "√" },
    grid_vocab: { P: "player", _: "empty", O: "hole", G: "goal", X: "player in hole", "√": "player on goal" },
    action_lookup: { 1: "Left", 2: "Down", 3: "Right", 4: "Up" },
  };
}

export const frozenLake: EnvType<FrozenLakeConfig> = {
  name: "frozen_lake",
  description: "Walk from start to goal on slippery ice without falling into a hole (gymnasium dynamics).",
  integerRewards: true,
  defaults,
  resolveConfig(overrides) {
    // map_seed is overwritten by every reset in RAGEN, so accept and drop it.
    const { map_seed: _ignored, ...rest } = overrides;
    return overlayConfig("frozen_lake", defaults(), rest, {
      size: integerIn(2, 64),
      p: numberIn(0, 1),
      success_rate: numberIn(0, 1),
      is_slippery: oneOf(true, false),
      render_mode: oneOf("text"),
      observation_format: oneOf("grid", "coord", "grid_coord"),
      grid_lookup: stringMap(["0", "1", "2", "3", "4", "5"]),
      grid_vocab: stringMap(null),
      action_lookup: stringMap(["1", "2", "3", "4"]),
    });
  },
  create: (config) => new FrozenLakeEnv(config),
  vocabulary: (config) => ({
    gridVocab: config.grid_vocab,
    actionNames: [1, 2, 3, 4].map((id) => config.action_lookup[id]),
  }),
  solve(env: Env, budget: number) {
    const lake = env as FrozenLakeEnv;
    const tiles = lake.desc.join("").split("");
    const path = shortestPath(tiles, lake.size, lake.position);
    return {
      actions: path === null ? null : path.map((id) => env.actionNames[id - 1]),
      successProbability: successProbability(tiles, lake.config, lake.position, budget),
    };
  },
};
