// The `sokoban` env type: RAGEN's SokobanEnvConfig defaults, validation and helpers.
import { integerIn, oneOf, overlayConfig, pairOf, stringMap } from "../config.ts";
import { type Env, EnvConfigError, type EnvType } from "../types.ts";
import { type SokobanConfig, SokobanEnv } from "./sokoban-env.ts";

export { reseedAfterFailure, type SokobanConfig, SokobanEnv } from "./sokoban-env.ts";

function defaults(): SokobanConfig {
  return {
    dim_room: [6, 6],
    max_steps: 100,
    num_boxes: 3,
    search_depth: 300,
    grid_lookup: { 0: "#", 1: "_", 2: "O", 3: "√", 4: "X", 5: "P", 6: "S" },
    grid_vocab: {
      "#": "wall",
      _: "empty",
      O: "target",
      "√": "box on target",
      X: "box",
      P: "player",
      S: "player on target",
    },
    action_lookup: { 1: "Up", 2: "Down", 3: "Left", 4: "Right" },
    render_mode: "text",
    observation_format: "grid",
  };
}

const side = integerIn(3, 64);

export const sokoban: EnvType<SokobanConfig> = {
  name: "sokoban",
  description: "Push every box onto a target (gym_sokoban dynamics, RAGEN generation).",
  integerRewards: false,
  defaults,
  resolveConfig(overrides) {
    // RAGEN replaces dim_room by (dim_x, dim_y) when both are given.
    const { dim_x, dim_y, ...rest } = overrides;
    if ((dim_x === undefined) !== (dim_y === undefined)) {
      throw new EnvConfigError(dim_x === undefined ? "dim_y" : "dim_x", "dim_x and dim_y go together");
    }
    if (dim_x !== undefined) rest.dim_room = [dim_x, dim_y];
    const config = overlayConfig("sokoban", defaults(), rest, {
      dim_room: pairOf(side),
      max_steps: integerIn(1, 1_000_000),
      num_boxes: integerIn(1, 16),
      search_depth: integerIn(1, 10_000),
      grid_lookup: stringMap(["0", "1", "2", "3", "4", "5", "6"]),
      grid_vocab: stringMap(null),
      action_lookup: stringMap(["1", "2", "3", "4"]),
      render_mode: oneOf("text"),
      observation_format: oneOf("grid", "coord", "grid_coord"),
    });
    const [rows, cols] = config.dim_room;
    if (config.num_boxes + 2 > (rows - 2) * (cols - 2)) {
      throw new EnvConfigError("num_boxes", `${config.num_boxes} boxes cannot fit a ${rows}x${cols} room`);
    }
    return config;
  },
  create: (config) => new SokobanEnv(config),
  vocabulary: (config) => ({
    gridVocab: config.grid_vocab,
    actionNames: [1, 2, 3, 4].map((id) => config.action_lookup[id]),
  }),
  solve(env: Env, _budget: number) {
    const ids = (env as SokobanEnv).solve(100);
    return { actions: ids === null ? null : ids.map((id) => env.actionNames[id - 1]) };
  },
};
