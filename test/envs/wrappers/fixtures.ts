// Bare envs for the wrapper tests: no rules of their own, so every refusal is the wrapper's.
import type { AsyncEnv, Env, JsonValue, StepResult } from "../../../envs/types.ts";

/**
 * Three cells in a row; 1 Left, 2 Right. Reward: the action id. Ends (terminated) on the right
 * end. Counts the steps it was given, so a test can see a refused step never reached it.
 */
export class Row implements Env {
  readonly actionNames = ["Left", "Right"];
  position = 0;
  stepsTaken = 0;

  get done(): boolean {
    return this.position === 2;
  }

  reset(seed: number): string {
    this.position = seed % 2;
    return this.render();
  }

  step(action: number): StepResult {
    this.stepsTaken++;
    this.position = Math.min(Math.max(this.position + (action === 2 ? 1 : -1), 0), 2);
    return {
      observation: this.render(),
      reward: action,
      terminated: this.done,
      truncated: false,
      info: { success: this.done, action_is_effective: true, action_is_valid: true },
    };
  }

  render(): string {
    return ["P__", "_P_", "__P"][this.position];
  }

  snapshot(): JsonValue {
    return { position: this.position };
  }

  restore(saved: JsonValue): void {
    this.position = (saved as { position: number }).position;
  }
}

/** Row answering through promises and taking free-text actions ("left", "right"); no snapshots. */
export class RemoteRow implements AsyncEnv {
  readonly textActions = true;
  readonly actionNames: readonly string[] = [];
  private readonly row = new Row();

  get done(): boolean {
    return this.row.done;
  }

  async reset(seed: number): Promise<string> {
    return this.row.reset(seed);
  }

  async step(action: number | string): Promise<StepResult> {
    return this.row.step(action === "right" ? 2 : 1);
  }

  render(): string {
    return this.row.render();
  }
}
