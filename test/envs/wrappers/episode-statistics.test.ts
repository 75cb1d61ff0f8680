// EpisodeStatistics: the return and length of the episode since its reset.
import { describe, expect, it } from "vitest";
import type { Env } from "../../../envs/types.ts";
import { EpisodeStatistics } from "../../../envs/wrappers/episode-statistics.ts";
import { OrderEnforcing } from "../../../envs/wrappers/order-enforcing.ts";
import { RemoteRow, Row } from "./fixtures.ts";

describe("EpisodeStatistics", () => {
  it("sums the rewards and counts the steps since the reset", () => {
    const env = new EpisodeStatistics(new Row());
    env.reset(0);
    expect([env.episodeReturn, env.episodeLength]).toEqual([0, 0]);
    env.step(1);
    env.step(2);
    env.step(2);
    expect([env.episodeReturn, env.episodeLength]).toEqual([5, 3]);
    env.reset(1);
    expect([env.episodeReturn, env.episodeLength]).toEqual([0, 0]);
  });

  it("sums in step order, as a running total does (0.1 + 0.2 + 0.3 is not 0.6)", () => {
    const rewards = [0.1, 0.2, 0.3];
    let next = 0;
    const fractions: Env = {
      actionNames: ["Go"],
      done: false,
      reset: () => "",
      step: () => ({
        observation: "",
        reward: rewards[next++],
        terminated: false,
        truncated: false,
        info: { success: false, action_is_effective: true, action_is_valid: true },
      }),
      render: () => "",
      snapshot: () => null,
      restore: () => {},
    };
    const env = new EpisodeStatistics(fractions);
    env.reset(0);
    for (const _ of rewards) env.step(1);
    expect(env.episodeReturn).toBe(0.1 + 0.2 + 0.3);
    expect(env.episodeReturn).not.toBe(0.6);
  });

  it("does not count a refused step", () => {
    const env = new EpisodeStatistics(new OrderEnforcing(new Row()));
    expect(() => env.step(2)).toThrow("step before reset");
    env.reset(1);
    env.step(2);
    expect(() => env.step(2)).toThrow("the episode is done");
    expect([env.episodeReturn, env.episodeLength]).toEqual([2, 1]);
  });

  it("counts an env that answers later when its answer comes", async () => {
    const env = new EpisodeStatistics(new RemoteRow());
    await env.reset(0);
    await env.step("right");
    expect([env.episodeReturn, env.episodeLength]).toEqual([2, 1]);
  });

  it("keeps its statistics in the snapshot", () => {
    const env = new EpisodeStatistics(new Row());
    env.reset(0);
    env.step(2);
    const saved = env.snapshot!();
    expect(saved).toEqual({ env: { position: 1 }, episode_return: 2, episode_length: 1 });
    const copy = new EpisodeStatistics(new Row());
    copy.restore!(saved);
    expect([copy.episodeReturn, copy.episodeLength, copy.render()]).toEqual([2, 1, "_P_"]);
  });
});
