// Gymnasium's OrderEnforcing, with the action check of RAGEN's envs: no step before the first
// reset, none after the episode ended (until the next reset), and only actions of the episode.
// The registry puts every env it makes in one (`tag.make()`, `tag.open()`), so an env family
// writes none of these checks itself.
import type { AsyncEnv, JsonValue } from "../types.ts";
import { EnvRuleError, Wrapper } from "./wrapper.ts";

export class OrderEnforcing<E extends AsyncEnv = AsyncEnv> extends Wrapper<E> {
  private hasReset = false;

  protected override ownRefusal(action: number | string | undefined): EnvRuleError | null {
    if (!this.hasReset) return new EnvRuleError("reset_needed", "step before reset");
    if (this.env.done) return new EnvRuleError("episode_done", "the episode is done; call reset first");
    if (action === undefined || this.takes(action)) return null;
    return new EnvRuleError("not_an_action", this.notAnAction(action));
  }

  protected override afterReset(): void {
    this.hasReset = true;
  }

  protected override load(saved: JsonValue): void {
    super.load(saved);
    this.hasReset = true;
  }

  /** Text for an env with free-text actions, else an id of the episode's action list. */
  private takes(action: number | string): boolean {
    if (this.env.textActions) return typeof action === "string";
    return (
      Number.isInteger(action) && (action as number) >= 1 && (action as number) <= this.actionNames.length
    );
  }

  private notAnAction(action: number | string): string {
    const shown = typeof action === "string" ? JSON.stringify(action) : String(action);
    if (this.env.textActions) return `action ${shown} is not text (this env takes free-text actions)`;
    const count = this.actionNames.length;
    const ids = count === 2 ? "1 or 2" : `one of 1..${count}`;
    return `action ${shown} is not ${ids} (${this.actionNames.join(", ")})`;
  }
}
