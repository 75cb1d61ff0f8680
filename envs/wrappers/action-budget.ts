// The action budget of an episode, as Gymnasium's TimeLimit is its step limit: a tag's
// max_actions_per_traj, which RAGEN's rollout (not the env) enforces. The episode is over once
// the budget is spent, and a further step is refused. The step results stay the env's own:
// RAGEN tells an episode the env ended from one the budget ended (`endedByBudget`), so the
// budget does not mark the last step truncated as TimeLimit would.
import type { AsyncEnv, JsonValue, StepResult } from "../types.ts";
import { EnvConfigError } from "../types.ts";
import { EnvRuleError, Wrapper } from "./wrapper.ts";

export class ActionBudget<E extends AsyncEnv = AsyncEnv> extends Wrapper<E> {
  readonly maxActions: number;
  private used = 0;

  constructor(env: E, maxActions: number) {
    super(env);
    if (!Number.isInteger(maxActions) || maxActions < 1)
      throw new EnvConfigError("max_actions_per_traj", `${maxActions} is not a positive integer`);
    this.maxActions = maxActions;
  }

  /** Actions stepped since the reset. */
  get actionsUsed(): number {
    return this.used;
  }

  get actionsLeft(): number {
    return this.maxActions - this.used;
  }

  /** The env ended the episode, or the budget did. */
  override get done(): boolean {
    return this.env.done || this.used >= this.maxActions;
  }

  /** The budget ended the episode, the env did not. */
  get endedByBudget(): boolean {
    return this.used >= this.maxActions && !this.env.done;
  }

  protected override ownRefusal(): EnvRuleError | null {
    if (this.used < this.maxActions) return null;
    return new EnvRuleError(
      "action_budget",
      `the action budget of ${this.maxActions} is spent; call reset first`,
    );
  }

  protected override afterReset(): void {
    this.used = 0;
  }

  protected override afterStep(result: StepResult): StepResult {
    this.used++;
    return result;
  }

  protected override save(): JsonValue {
    return { env: super.save(), actions_used: this.used };
  }

  protected override load(saved: JsonValue): void {
    const { env, actions_used } = saved as { env: JsonValue; actions_used: number };
    super.load(env);
    this.used = actions_used;
  }
}
