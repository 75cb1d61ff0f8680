// RAGEN's config/envs.yaml tags for the envs rollgym ships (VisualSimpleSokoban's image render
// is not implemented). Instruction texts are verbatim, trailing spaces included.
import { bandit } from "./bandit/index.ts";
import { frozenLake } from "./frozen-lake/index.ts";
import { EnvRegistry, type TagSpec } from "./registry.ts";
import { sokoban } from "./sokoban/index.ts";

const SOKOBAN_INSTRUCTION =
  "You are solving the Sokoban puzzle. \n" +
  "You are the player and you need to push all boxes to targets. \n" +
  "When you are right next to a box, you can push it by moving in the same direction. \n" +
  "You cannot push a box through a wall, and you cannot pull a box. \n" +
  "The answer should be a sequence of actions, like <answer>Right || Right || Up</answer>\n";

const COORD_SOKOBAN_INSTRUCTION =
  "You are solving the Sokoban puzzle. You are the player and you need to push all boxes to targets.\n" +
  "You are provided with a symbol grid and the zero-indexed coordinates of the player, each box, and each target. \n" +
  "Coordinates range from the top-left corner (0, 0) to the bottom-right corner (5, 5). \n" +
  "When you are exactly next to a box, you can push it by moving in the same direction. \n" +
  "You cannot push a box through a wall, and you cannot pull a box.\n" +
  "The answer should be a sequence of actions, like <answer>Right || Right || Up</answer>.\n";

const FROZEN_LAKE_INSTRUCTION =
  "You are solving the FrozenLake puzzle. Forbid the whole and go to the target. You may move to the unintended direction due to the slippery ice. Example answer format: <think>To forbid the hole and go to the target, I should go left then go up.</think><answer>Left || Up</answer>";

const COORD_FROZEN_LAKE_INSTRUCTION =
  "You are solving the FrozenLake puzzle. The observation includes both a symbol grid and zero-indexed coordinates for the start, goal, player, and any holes.\n" +
  "Coordinates range from the top-left corner (0, 0) to the bottom-right corner (5, 5).\n" +
  "Beware that the ice is slippery, so the agent might slide and end up in an unintended tile.\n" +
  "Respond with a sequence of actions such as <answer>Left || Up || Up</answer>.\n";

const common = { parallel_friendly: false, max_workers: 32 };

export const RAGEN_TAGS: readonly TagSpec[] = [
  {
    tag: "SimpleSokoban",
    env_type: "sokoban",
    max_actions_per_traj: 10,
    env_instruction: SOKOBAN_INSTRUCTION,
    max_tokens: 100,
    ...common,
    env_config: { dim_x: 6, dim_y: 6, num_boxes: 1, max_steps: 100 },
  },
  {
    tag: "LargerSokoban",
    env_type: "sokoban",
    max_actions_per_traj: 10,
    env_instruction: SOKOBAN_INSTRUCTION,
    max_tokens: 100,
    ...common,
    env_config: { dim_x: 8, dim_y: 8, num_boxes: 2, max_steps: 100, search_depth: 10 },
  },
  {
    tag: "SokobanDifferentGridVocab",
    env_type: "sokoban",
    max_actions_per_traj: 10,
    env_instruction: SOKOBAN_INSTRUCTION,
    max_tokens: 100,
    ...common,
    env_config: {
      search_depth: 30,
      dim_x: 6,
      dim_y: 6,
      num_boxes: 1,
      max_steps: 100,
      grid_lookup: { 0: "W", 1: ".", 2: "G", 3: "C", 4: "B", 5: "A", 6: "@" },
      grid_vocab: {
        W: "wall",
        ".": "empty",
        G: "target",
        C: "box on target",
        B: "box",
        A: "player",
        "@": "player on target",
      },
    },
  },
  {
    tag: "CoordSokoban",
    env_type: "sokoban",
    max_actions_per_traj: 10,
    env_instruction: COORD_SOKOBAN_INSTRUCTION,
    max_tokens: 120,
    ...common,
    env_config: { dim_x: 6, dim_y: 6, num_boxes: 1, max_steps: 100, observation_format: "grid_coord" },
  },
  {
    tag: "FrozenLake",
    env_type: "frozen_lake",
    max_actions_per_traj: 10,
    env_instruction: FROZEN_LAKE_INSTRUCTION,
    max_tokens: 100,
    ...common,
    env_config: { success_rate: 0.8 },
  },
  {
    tag: "CoordFrozenLake",
    env_type: "frozen_lake",
    max_actions_per_traj: 10,
    env_instruction: COORD_FROZEN_LAKE_INSTRUCTION,
    max_tokens: 120,
    ...common,
    env_config: { observation_format: "grid_coord", success_rate: 0.8 },
  },
  {
    tag: "Bandit",
    env_type: "bandit",
    max_actions_per_traj: 1,
    env_instruction: "",
    max_tokens: 100,
    ...common,
    env_config: null,
  },
  {
    tag: "BanditTest",
    env_type: "bandit",
    max_actions_per_traj: 1,
    env_instruction: "",
    max_tokens: 100,
    ...common,
    env_config: { split: "test" },
  },
];

/** A registry holding the built-in env types and RAGEN's tags; callers may add their own. */
export function createRegistry(): EnvRegistry {
  const registry = new EnvRegistry();
  registry.registerType(sokoban);
  registry.registerType(frozenLake);
  registry.registerType(bandit);
  for (const spec of RAGEN_TAGS) registry.registerTag(spec);
  return registry;
}
