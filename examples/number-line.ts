// A user-defined environment, registered next to RAGEN's: walk along a number line to a
// target. It shows the whole contract — an EnvType with defaults, validation and a factory,
// an Env with reset/step/render/snapshot, and a tag with an instruction and a budget.
import { integerIn, overlayConfig } from "../envs/config.ts";
import { type EnvRegistry, PythonRandom } from "../envs/index.ts";
import type { Env, EnvType, JsonValue, StepResult } from "../envs/types.ts";

interface NumberLineConfig {
  length: number;
}

class NumberLineEnv implements Env {
  readonly actionNames = ["Left", "Right"];
  private position = 0;
  private target = 0;
  private finished = false;
  private readonly length: number;

  constructor(config: NumberLineConfig) {
    this.length = config.length;
  }

  get done(): boolean {
    return this.finished;
  }

  reset(seed: number): string {
    const rng = new PythonRandom(seed);
    this.position = rng.randbelow(this.length);
    do this.target = rng.randbelow(this.length);
    while (this.target === this.position);
    this.finished = false;
    return this.render();
  }

  // The registry's OrderEnforcing refuses a step before reset, after the end and with an
  // action other than 1 or 2, so step can assume none of them.
  step(action: number): StepResult {
    const before = this.position;
    this.position = Math.min(Math.max(this.position + (action === 1 ? -1 : 1), 0), this.length - 1);
    this.finished = this.position === this.target;
    return {
      observation: this.render(),
      reward: this.finished ? 1 : -0.1,
      terminated: this.finished,
      truncated: false,
      info: { success: this.finished, action_is_effective: this.position !== before, action_is_valid: true },
    };
  }

  render(): string {
    return Array.from({ length: this.length }, (_, i) =>
      i === this.position ? "P" : i === this.target ? "T" : "_",
    ).join("");
  }

  snapshot(): JsonValue {
    return { position: this.position, target: this.target, finished: this.finished };
  }

  restore(snapshot: JsonValue): void {
    const s = snapshot as { position: number; target: number; finished: boolean };
    this.position = s.position;
    this.target = s.target;
    this.finished = s.finished;
  }
}

export const numberLine: EnvType<NumberLineConfig> = {
  name: "number_line",
  description: "Walk left or right until you stand on the target.",
  integerRewards: false,
  defaults: () => ({ length: 7 }),
  resolveConfig: (overrides) =>
    overlayConfig("number_line", { length: 7 }, overrides, { length: integerIn(2, 100) }),
  create: (config) => new NumberLineEnv(config),
  vocabulary: () => ({ gridVocab: { P: "you", T: "target", _: "empty" }, actionNames: ["Left", "Right"] }),
};

/** Add the env type and one tag to a registry. */
export function registerNumberLine(registry: EnvRegistry): void {
  registry.registerType(numberLine);
  registry.registerTag({
    tag: "NumberLine",
    env_type: "number_line",
    max_actions_per_traj: 8,
    env_instruction: "Move onto the target. Answer like <answer>Left || Left</answer>.",
    max_tokens: 50,
    env_config: { length: 9 },
  });
}

/** The plugin entry point: `rollgym … --plugin examples/number-line.ts` calls it. */
export { registerNumberLine as register };
