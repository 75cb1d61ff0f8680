// OrderEnforcing: no step before reset or after the end, only the episode's actions; a refused
// step never reaches the env. Also what every wrapper does (envs/wrappers/wrapper.ts): answer
// as its env does, forward snapshots only when the env has them, and unwrap.
import { describe, expect, it } from "vitest";
import { createRegistry } from "../../../envs/catalog.ts";
import type { Env } from "../../../envs/types.ts";
import { OrderEnforcing } from "../../../envs/wrappers/order-enforcing.ts";
import { EnvRuleError, unwrap } from "../../../envs/wrappers/wrapper.ts";
import { RemoteRow, Row } from "./fixtures.ts";

/** The rule and message of what `step` threw. */
function refusalOf(step: () => unknown): { rule: string; message: string } {
  try {
    step();
  } catch (error) {
    if (error instanceof EnvRuleError) return { rule: error.rule, message: error.message };
    throw error;
  }
  throw new Error("the step was not refused");
}

describe("OrderEnforcing", () => {
  it("refuses a step before the first reset", () => {
    const row = new Row();
    const env = new OrderEnforcing(row);
    expect(refusalOf(() => env.step(2))).toEqual({ rule: "reset_needed", message: "step before reset" });
    expect(row.stepsTaken).toBe(0);
    expect(env.refusal()?.rule).toBe("reset_needed");
  });

  it("steps after a reset, refuses after the end, and steps again after the next reset", () => {
    const row = new Row();
    const env = new OrderEnforcing(row);
    expect(env.reset(1)).toBe("_P_");
    expect(env.refusal()).toBeNull();
    const last = env.step(2);
    expect(last).toMatchObject({ observation: "__P", reward: 2, terminated: true });
    expect(env.done).toBe(true);
    expect(refusalOf(() => env.step(1))).toEqual({
      rule: "episode_done",
      message: "the episode is done; call reset first",
    });
    expect(row.stepsTaken).toBe(1);
    expect(env.render()).toBe("__P");
    env.reset(0);
    expect(env.step(2).observation).toBe("_P_");
  });

  it("refuses actions outside the episode's ids, naming the ids and actions", () => {
    const row = new Row();
    const env = new OrderEnforcing(row);
    env.reset(0);
    for (const action of [0, 3, -1, 1.5, Number.NaN])
      expect(refusalOf(() => env.step(action))).toEqual({
        rule: "not_an_action",
        message: `action ${action} is not 1 or 2 (Left, Right)`,
      });
    expect(refusalOf(() => (env as OrderEnforcing).step("Left"))).toEqual({
      rule: "not_an_action",
      message: 'action "Left" is not 1 or 2 (Left, Right)',
    });
    expect(env.refusal(7)?.rule).toBe("not_an_action");
    expect(row.stepsTaken).toBe(0);
  });

  it("says one of 1..N for other action counts (Sokoban's four)", () => {
    const env = createRegistry().tag("SimpleSokoban").make();
    env.reset(3);
    expect(refusalOf(() => env.step(5)).message).toBe("action 5 is not one of 1..4 (Up, Down, Left, Right)");
  });

  it("the order comes before the action: a bad action after the end is refused as done", () => {
    const env = new OrderEnforcing(new Row());
    expect(env.refusal(9)?.rule).toBe("reset_needed");
    env.reset(1);
    env.step(2);
    expect(refusalOf(() => env.step(9)).rule).toBe("episode_done");
  });

  it("an env with free-text actions takes text and refuses ids, and is waited for only when it answers later", async () => {
    const env = new OrderEnforcing(new RemoteRow());
    expect(refusalOf(() => env.step("right")).rule).toBe("reset_needed");
    const reset = env.reset(1);
    expect(reset).toBeInstanceOf(Promise);
    expect(await reset).toBe("_P_");
    expect(refusalOf(() => env.step(2))).toEqual({
      rule: "not_an_action",
      message: "action 2 is not text (this env takes free-text actions)",
    });
    expect(await env.step("right")).toMatchObject({ terminated: true });
    expect(refusalOf(() => env.step("left")).rule).toBe("episode_done");
  });

  it("an in-process env answers at once, and its snapshot continues after restore", () => {
    const env: Env = new OrderEnforcing(new Row());
    expect(typeof env.reset(0)).toBe("string");
    const saved = env.snapshot();
    expect(saved).toEqual({ position: 0 });
    const copy = new OrderEnforcing(new Row());
    copy.restore(saved); // a restored episode needs no reset
    expect(copy.step(2).observation).toBe("_P_");
  });

  it("has snapshots only when its env has them", () => {
    expect(new OrderEnforcing(new RemoteRow()).snapshot).toBeUndefined();
    expect(typeof new OrderEnforcing(new Row()).snapshot).toBe("function");
  });

  it("unwraps to the env under every wrapper", () => {
    const row = new Row();
    const env = new OrderEnforcing(new OrderEnforcing(row));
    expect(env.unwrapped).toBe(row);
    expect(unwrap(env)).toBe(row);
    expect(unwrap(row)).toBe(row);
  });

  it("is what the registry makes, and the solver still reaches the env", () => {
    const tag = createRegistry().tag("SimpleSokoban");
    const env = tag.make();
    expect(env).toBeInstanceOf(OrderEnforcing);
    expect(() => env.step(1)).toThrow("step before reset");
    env.reset(10);
    expect(tag.solve(env)?.actions?.length).toBeGreaterThan(0);
    expect(tag.open()).toBeInstanceOf(OrderEnforcing);
  });
});
