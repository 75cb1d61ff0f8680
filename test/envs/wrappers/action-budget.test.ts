// ActionBudget: the episode ends when the budget is spent, a further step is refused, and the
// step results stay the env's own.
import { describe, expect, it } from "vitest";
import { EnvConfigError } from "../../../envs/types.ts";
import { ActionBudget } from "../../../envs/wrappers/action-budget.ts";
import { OrderEnforcing } from "../../../envs/wrappers/order-enforcing.ts";
import { EnvRuleError } from "../../../envs/wrappers/wrapper.ts";
import { RemoteRow, Row } from "./fixtures.ts";

describe("ActionBudget", () => {
  it("counts actions, ends the episode when they are spent and refuses the next step", () => {
    const row = new Row();
    const env = new ActionBudget(row, 2);
    env.reset(0);
    expect([env.actionsUsed, env.actionsLeft, env.done]).toEqual([0, 2, false]);
    env.step(1);
    // The last action of the budget: the env did not end the episode, the budget did.
    const last = env.step(1);
    expect(last).toMatchObject({ terminated: false, truncated: false });
    expect([env.actionsUsed, env.actionsLeft, env.done, env.endedByBudget]).toEqual([2, 0, true, true]);
    let refused: unknown;
    try {
      env.step(2);
    } catch (error) {
      refused = error;
    }
    expect(refused).toBeInstanceOf(EnvRuleError);
    expect(refused).toMatchObject({
      rule: "action_budget",
      message: "the action budget of 2 is spent; call reset first",
    });
    expect(row.stepsTaken).toBe(2);
    env.reset(0);
    expect([env.actionsUsed, env.done]).toEqual([0, false]);
  });

  it("an episode the env ends on its last action ended by the env, not the budget", () => {
    const env = new ActionBudget(new Row(), 1);
    env.reset(1);
    env.step(2);
    expect([env.done, env.endedByBudget]).toEqual([true, false]);
  });

  it("asks its budget before the wrapped rules", () => {
    const env = new ActionBudget(new OrderEnforcing(new Row()), 1);
    expect(env.refusal()?.rule).toBe("reset_needed");
    env.reset(0);
    env.step(2);
    expect(env.refusal()?.rule).toBe("action_budget");
  });

  it("a refused step spends nothing", () => {
    const env = new ActionBudget(new OrderEnforcing(new Row()), 2);
    env.reset(0);
    expect(() => env.step(5)).toThrow("action 5 is not 1 or 2");
    expect(env.actionsUsed).toBe(0);
  });

  it("counts an env that answers later when its answer comes", async () => {
    const env = new ActionBudget(new RemoteRow(), 3);
    await env.reset(0);
    const step = env.step("right");
    expect(step).toBeInstanceOf(Promise);
    await step;
    expect(env.actionsUsed).toBe(1);
  });

  it("keeps its count in the snapshot", () => {
    const env = new ActionBudget(new Row(), 3);
    env.reset(0);
    env.step(2);
    const saved = env.snapshot!();
    expect(saved).toEqual({ env: { position: 1 }, actions_used: 1 });
    const copy = new ActionBudget(new Row(), 3);
    copy.restore!(JSON.parse(JSON.stringify(saved)));
    expect([copy.actionsUsed, copy.render()]).toEqual([1, "_P_"]);
  });

  it("refuses a budget that is not a positive integer, naming the setting", () => {
    for (const bad of [0, -1, 1.5, Number.NaN]) {
      expect(() => new ActionBudget(new Row(), bad)).toThrow(EnvConfigError);
      expect(() => new ActionBudget(new Row(), bad)).toThrow(
        `max_actions_per_traj: ${bad} is not a positive integer`,
      );
    }
  });
});
