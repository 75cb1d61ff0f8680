/**
 * RAGEN's two-armed bandit with named arms.
 *
 * Reset draws an arm-name pair and which action id gets the low ("safe") arm; the observation
 * is the game description naming both arms. Actions: 1 and 2, the arms in the order shown.
 * Rewards (Python floats): the low arm pays `lo_arm_score`; the high arm pays `hi_arm_hiscore`
 * with probability `hi_arm_hiscore_prob`, else `hi_arm_loscore`.
 * Episode end: terminated after one pull. Info: success (pulled the high arm).
 * Seeding: every member of a group shares the seed (RAGEN adds a per-instance counter; see docs).
 */

import { pyFloatRepr } from "../pyrepr.ts";
import { NumpyGenerator } from "../rng/numpy-generator.ts";
import type { Env, JsonValue, StepResult } from "../types.ts";

export interface BanditConfig {
  split: "train" | "test";
  lo_arm_score: number;
  hi_arm_loscore: number;
  hi_arm_hiscore: number;
  hi_arm_hiscore_prob: number;
  render_mode: "text";
}

/** (low arm, high arm) name pairs per split. */
export const ARM_NAMES: Readonly<Record<"train" | "test", readonly (readonly [string, string])[]>> = {
  train: [
    ["Teacher", "Trader"],
    ["Nurse", "StartupFounder"],
    ["Librarian", "Investor"],
    ["Accountant", "StockBroker"],
    ["Engineer", "RealEstateAgent"],
    ["Pharmacist", "Musician"],
    ["Clerk", "Freelancer"],
    ["Technician", "Youtuber"],
    ["Planner", "Artist"],
    ["Postman", "Pilot"],
    ["Banker", "VentureCapitalist"],
    ["Gardener", "Cryptominer"],
  ],
  test: [
    ["Receptionist", "Explorer"],
    ["Archivist", "Filmmaker"],
    ["Bookkeeper", "Consultant"],
    ["SocialWorker", "Photographer"],
    ["Mechanic", "GameDesigner"],
    ["Secretary", "Entrepreneur"],
    ["Cashier", "DataScientist"],
    ["CivilServant", "StartupAccelerator"],
  ],
};

function gameText(nameA: string, nameB: string): string {
  return (
    "You are playing a bandit game. Goal: Maximize your total reward by choosing which arm to pull. \n" +
    "Game Rules: \n" +
    `1. There are 2 arms, named ${nameA} and ${nameB}\n` +
    "2. Each arm has its own reward distribution, related to their names. \n" +
    "3. Analyze the symbolic meaning of each arm's name to guess how their reward distribution might behave.\n" +
    "4. Based on the symbolic meaning of their names, which arm do you think is more likely to give higher rewards on average? " +
    `Choose between ${nameA} and ${nameB}, and output like <answer> ${nameA} </answer> or <answer> ${nameB} </answer>.\n`
  );
}

export class BanditEnv implements Env {
  readonly config: BanditConfig;
  private names: [string, string] = ["", ""];
  private highArm = "";
  private rng: NumpyGenerator | null = null;
  private finished = false;
  private text = "";

  constructor(config: BanditConfig) {
    this.config = config;
  }

  get actionNames(): readonly string[] {
    return this.names;
  }

  get done(): boolean {
    return this.finished;
  }

  get highArmName(): string {
    return this.highArm;
  }

  reset(seed: number): string {
    this.rng = new NumpyGenerator(seed);
    const pairs = ARM_NAMES[this.config.split];
    const [lo, hi] = pairs[Math.trunc(this.rng.random() * pairs.length)];
    this.names = this.rng.random() < 0.5 ? [lo, hi] : [hi, lo];
    this.highArm = hi;
    this.finished = false;
    this.text = gameText(this.names[0], this.names[1]);
    return this.text;
  }

  /** Steps a reset, unfinished episode with action 1 or 2 (the registry's OrderEnforcing checks). */
  step(action: number): StepResult {
    const arm = this.names[action - 1];
    const high = arm === this.highArm;
    let reward = this.config.lo_arm_score;
    if (high) {
      reward =
        this.rng!.random() < this.config.hi_arm_hiscore_prob
          ? this.config.hi_arm_hiscore
          : this.config.hi_arm_loscore;
    }
    this.finished = true;
    this.text = `${arm}: ${pyFloatRepr(reward)} points`;
    return {
      observation: this.text,
      reward,
      terminated: true,
      truncated: false,
      info: { action_is_effective: true, action_is_valid: true, success: high },
    };
  }

  render(): string {
    return this.text;
  }

  snapshot(): JsonValue {
    return {
      names: this.names,
      highArm: this.highArm,
      rng: this.rng ? (this.rng.getState() as unknown as JsonValue) : null,
      finished: this.finished,
      text: this.text,
    };
  }

  restore(snapshot: JsonValue): void {
    const s = snapshot as { [k: string]: JsonValue };
    this.names = s.names as [string, string];
    this.highArm = s.highArm as string;
    this.rng = s.rng === null ? null : NumpyGenerator.fromState(s.rng as never);
    this.finished = s.finished as boolean;
    this.text = s.text as string;
  }
}
