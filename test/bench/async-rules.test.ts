// The two checks `rollgym bench async` counts violations with, on made-up groups: an end-to-end
// run that obeys the rules cannot show that a loosened check would still catch a broken server.
import { describe, expect, it } from "vitest";
import { agesOf, withinCapacity } from "../../src/bench/async-run.ts";
import type { ArrivedGroup } from "../../src/bench/trainer.ts";

const S = 1;
const B = 4;

function group(minVersion: number, admitted: ArrivedGroup["admitted"]): ArrivedGroup {
  return { rollout: "r", group: 0, episodes: 2, failed: 0, minVersion, admitted, at: 0, longestLog: 0 };
}

describe("agesOf", () => {
  // Admitted as the 5th group (a = 5, ⌈5 ÷ 4⌉ = 2) and taken at step 3: at most S + 3 − 2 = 2 versions old.
  const admitted = { version: 1, accepted: 4, running: 1, capacity: (S + 1 + 1) * B };

  it("counts a group exactly as old as the bound as within it", () => {
    const { ages, violations } = agesOf([{ group: group(3, admitted), step: 3, ordinal: 5 }], S, B);
    expect(ages).toEqual({ "2": 1 });
    expect(violations).toBe(0);
  });

  it("counts a group one version older than the bound as one violation", () => {
    const { ages, violations } = agesOf([{ group: group(2, admitted), step: 3, ordinal: 5 }], S, B);
    expect(ages).toEqual({ "3": 1 });
    expect(violations).toBe(1);
  });

  it("under strict_staleness, counts any group older than S as a violation", () => {
    const trained = [{ group: group(3, admitted), step: 3, ordinal: 5 }];
    expect(agesOf(trained, S, B, true)).toEqual({ ages: { "2": 1 }, violations: 1 });
    expect(agesOf([{ group: group(4, admitted), step: 3, ordinal: 5 }], S, B, true).violations).toBe(0);
  });

  it("counts a group played by weights newer than the trainer's as a violation", () => {
    expect(agesOf([{ group: group(6, admitted), step: 3, ordinal: 5 }], S, B).violations).toBe(1);
  });

  it("allows no age at all to a group without admission counts (the classic loop)", () => {
    const trained = [
      { group: group(5, null), step: 1, ordinal: 5 },
      { group: group(4, null), step: 1, ordinal: 5 },
    ];
    expect(agesOf(trained, S, B)).toEqual({ ages: { "0": 1, "1": 1 }, violations: 1 });
  });
});

describe("withinCapacity", () => {
  const v = 2;
  const capacity = (S + v + 1) * B;

  it("accepts accepted + running up to (S + v + 1) × B", () => {
    expect(withinCapacity({ version: v, accepted: capacity - 3, running: 3, capacity }, S, B)).toBe(true);
  });

  it("rejects accepted + running = (S + v + 1) × B + 1", () => {
    expect(withinCapacity({ version: v, accepted: capacity - 2, running: 3, capacity }, S, B)).toBe(false);
  });

  it("rejects a capacity other than (S + v + 1) × B", () => {
    expect(withinCapacity({ version: v, accepted: 1, running: 1, capacity: capacity + B }, S, B)).toBe(false);
    expect(withinCapacity({ version: v, accepted: 1, running: 1, capacity: capacity - 1 }, S, B)).toBe(false);
  });
});
