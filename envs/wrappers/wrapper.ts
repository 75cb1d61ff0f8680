// The base of env wrappers, as Gymnasium's Wrapper: an env around an env that forwards what it
// does not change. A wrapper answers as the env it wraps does — at once for an in-process env,
// through a promise for a remote one — so wrapping an `Env` gives an `Env` and an in-process
// step never waits on a promise. A wrapper adds its rule through three hooks (before a step,
// after a step, after a reset) and keeps its own counters in the env's snapshot.
import type { AsyncEnv, Awaitable, JsonValue, StepResult } from "../types.ts";
import { EnvUsageError } from "../types.ts";

/** The rule a refused step broke. */
export type EnvRule = "reset_needed" | "episode_done" | "not_an_action" | "action_budget";

/**
 * A step the env's rules refuse. `rule` says which one, so that each surface (a rollout, the web
 * page, the OpenEnv server) words the refusal in its own protocol; the message is the env's.
 */
export class EnvRuleError extends EnvUsageError {
  readonly rule: EnvRule;
  constructor(rule: EnvRule, message: string) {
    super(message);
    this.name = "EnvRuleError";
    this.rule = rule;
  }
}

/** `use` applied to a value now, or to a promised value when it comes. */
function andThen<T, U>(value: Awaitable<T>, use: (value: T) => U): Awaitable<U> {
  return value instanceof Promise ? value.then(use) : use(value);
}

/** An action a step takes: a 1-based id, or text for an env with free-text actions. */
type ActionOf<E extends AsyncEnv> = Parameters<E["step"]>[0];

export class Wrapper<E extends AsyncEnv = AsyncEnv> implements AsyncEnv {
  readonly env: E;
  /** Present exactly when the wrapped env has snapshots (callers test for them). */
  readonly snapshot: E["snapshot"];
  readonly restore: E["restore"];

  constructor(env: E) {
    this.env = env;
    this.snapshot = (env.snapshot ? () => this.save() : undefined) as E["snapshot"];
    this.restore = (env.restore ? (saved: JsonValue) => this.load(saved) : undefined) as E["restore"];
  }

  /** The env under every wrapper. */
  get unwrapped(): AsyncEnv {
    return this.env instanceof Wrapper ? this.env.unwrapped : this.env;
  }

  get actionNames(): readonly string[] {
    return this.env.actionNames;
  }

  get textActions(): boolean | undefined {
    return this.env.textActions;
  }

  get done(): boolean {
    return this.env.done;
  }

  render(): string {
    return this.env.render();
  }

  reset(seed: number): ReturnType<E["reset"]> {
    return andThen(this.env.reset(seed), (observation) => {
      this.afterReset();
      return observation;
    }) as ReturnType<E["reset"]>;
  }

  step(action: ActionOf<E>): ReturnType<E["step"]> {
    const refused = this.ownRefusal(action);
    if (refused !== null) throw refused;
    return andThen(this.env.step(action), (result) => this.afterStep(result)) as ReturnType<E["step"]>;
  }

  /**
   * Why a step with `action` would be refused, by this wrapper or one it wraps, or null; without
   * an action, whether any step would be. Lets a caller answer a refusal before it parses the
   * action (the OpenEnv server's order of errors).
   */
  refusal(action?: ActionOf<E>): EnvRuleError | null {
    return this.ownRefusal(action) ?? (this.env instanceof Wrapper ? this.env.refusal(action) : null);
  }

  close(): void {
    this.env.close?.();
  }

  /** This wrapper's own rule for a step with `action` (undefined: any action). */
  protected ownRefusal(_action: ActionOf<E> | undefined): EnvRuleError | null {
    return null;
  }

  protected afterReset(): void {}

  protected afterStep(result: StepResult): StepResult {
    return result;
  }

  /** The env's snapshot; a wrapper with counters of its own keeps them beside it. */
  protected save(): JsonValue {
    return this.env.snapshot!();
  }

  protected load(saved: JsonValue): void {
    this.env.restore!(saved);
  }
}

/** The env under every wrapper of `env` (`env` itself when it has none). */
export function unwrap(env: AsyncEnv): AsyncEnv {
  return env instanceof Wrapper ? env.unwrapped : env;
}
