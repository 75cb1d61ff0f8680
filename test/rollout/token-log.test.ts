// The token log's JSON of its ids, extended as it grows, and its record built at the end.
import { describe, expect, it } from "vitest";
import { NOT_SAMPLED, TokenLog } from "../../src/rollout/token-log.ts";

describe("TokenLog", () => {
  it("idsJson is JSON.stringify(ids) after every kind of growth", () => {
    const prompt = [151644, 8948, 198, 0, 42];
    const log = new TokenLog(prompt);
    expect(log.idsJson()).toBe(JSON.stringify(prompt));
    log.sampled([7, 8, 151645], [-0.5, Number.NaN, -0.01]);
    log.inserted([198, 151644, 872]);
    expect(log.idsJson()).toBe(JSON.stringify(log.ids));
    // Asked twice without growth, and growth by an empty turn.
    expect(log.idsJson()).toBe(JSON.stringify(log.ids));
    log.sampled([], []);
    log.inserted([9]);
    log.sampled([10], [-1]);
    expect(log.idsJson()).toBe(JSON.stringify(log.ids));
  });

  it("idsJson of an empty log, and of one that starts empty and grows", () => {
    const log = new TokenLog([]);
    expect(log.idsJson()).toBe("[]");
    log.inserted([3]);
    expect(log.idsJson()).toBe("[3]");
    log.sampled([4, 5], [-1, -2]);
    expect(log.idsJson()).toBe("[3,4,5]");
  });

  it("logs that start from one prompt array share its JSON and grow apart", () => {
    const prompt = [1, 2, 3];
    const a = new TokenLog(prompt);
    const b = new TokenLog(prompt);
    a.sampled([4], [-1]);
    expect(a.idsJson()).toBe("[1,2,3,4]");
    b.sampled([5, 6], [-1, -1]);
    expect(b.idsJson()).toBe("[1,2,3,5,6]");
    expect(new TokenLog(prompt).idsJson()).toBe("[1,2,3]");
  });

  it("the record puts each turn's logprobs, mask, reward and versions at its ids", () => {
    const log = new TokenLog([1, 2]);
    log.sampled([3, 4], [-0.5, Number.NaN], [2, 3]);
    log.reward(1.5);
    log.inserted([5]);
    log.sampled([], []);
    log.reward(9);
    log.inserted([6]);
    log.sampled([7], [-2]);
    log.reward(-1);
    const record = log.record(true);
    expect(record.ids).toEqual([1, 2, 3, 4, 5, 6, 7]);
    expect(record.loss_mask).toEqual([0, 0, 1, 1, 0, 0, 1]);
    expect(record.logprobs).toEqual([0, 0, -0.5, Number.NaN, 0, 0, -2]);
    expect(record.rewards).toEqual([0, 0, 0, 1.5, 0, 0, -1]);
    expect(record.versions).toEqual([NOT_SAMPLED, NOT_SAMPLED, 2, 3, NOT_SAMPLED, NOT_SAMPLED, 0]);
    expect(record.turn_starts).toEqual([2, 5, 6]);
    expect(record.turn_ends).toEqual([4, 5, 7]);
    expect(record.prompt_length).toBe(2);
    expect(record.logprobs_missing).toBe(1);
    expect(log.record().versions).toBeUndefined();
    expect(log.sampledIds()).toEqual([3, 4, 7]);
  });
});
