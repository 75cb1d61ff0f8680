// The `bandit` env type: RAGEN's BanditEnvConfig defaults and validation.
import { numberIn, oneOf, overlayConfig } from "../config.ts";
import type { Env, EnvType } from "../types.ts";
import { type BanditConfig, BanditEnv } from "./bandit-env.ts";

export { ARM_NAMES, type BanditConfig, BanditEnv } from "./bandit-env.ts";

function defaults(): BanditConfig {
  return {
    split: "train",
    lo_arm_score: 0.1,
    hi_arm_loscore: 0.0,
    hi_arm_hiscore: 1.0,
    hi_arm_hiscore_prob: 0.25,
    render_mode: "text",
  };
}

const score = numberIn(-1e6, 1e6);

export const bandit: EnvType<BanditConfig> = {
  name: "bandit",
  description: "Choose between two named arms: a safe low arm and a risky high arm.",
  integerRewards: false,
  defaults,
  resolveConfig(overrides) {
    // action_space_start must stay 1 (ids are 1-based everywhere); action_lookup is filled at reset.
    const { action_space_start, action_lookup: _filledAtReset, ...rest } = overrides;
    if (action_space_start !== undefined && action_space_start !== 1) {
      return oneOf(1 as unknown as string)("action_space_start", action_space_start) as never;
    }
    return overlayConfig("bandit", defaults(), rest, {
      split: oneOf("train", "test"),
      lo_arm_score: score,
      hi_arm_loscore: score,
      hi_arm_hiscore: score,
      hi_arm_hiscore_prob: numberIn(0, 1),
      render_mode: oneOf("text"),
    });
  },
  create: (config) => new BanditEnv(config),
  // Arm names change per episode, so the system prompt lists none (RAGEN's lookup is None too).
  vocabulary: () => ({ gridVocab: null, actionNames: null }),
  solve: (env: Env) => ({ actions: [(env as BanditEnv).highArmName] }),
};
