// strict_staleness's order of sending (src/server/delivery/age-bound.ts): scripted cases, then a
// seeded simulation of a stream under the capacity rule with a trainer that takes B groups per
// update in arrival order, where every group must be trained within S versions of its admission.
import { describe, expect, it } from "vitest";
import { AgeBound } from "../../src/server/delivery/age-bound.ts";

describe("AgeBound", () => {
  it("holds the groups that overtook a long one until it is sent (S = 1, B = 2)", () => {
    const bound = new AgeBound(2);
    const sent: string[] = [];
    // Version 0: capacity (1 + 0 + 1) × 2 = 4 groups, due by step 1.
    for (let g = 0; g < 4; g++) bound.admit(1);
    for (const g of ["g1", "g2", "g3"]) bound.finished(1, () => sent.push(g));
    expect(sent).toEqual(["g1", "g2", "g3"]);
    // Version 1: two more, due by step 2. Sending one now would push g0 into step 2.
    bound.admit(2);
    bound.admit(2);
    bound.finished(2, () => sent.push("g4"));
    bound.finished(2, () => sent.push("g5"));
    expect(sent).toEqual(["g1", "g2", "g3"]);
    expect(bound.holding).toBe(2);
    bound.finished(1, () => sent.push("g0"));
    // g0 is the 4th group sent (step 1), then the held ones follow.
    expect(sent).toEqual(["g1", "g2", "g3", "g0", "g4", "g5"]);
    expect(bound.holding).toBe(0);
  });

  it("a group that will never be sent releases the ones held for it", () => {
    const bound = new AgeBound(2);
    const sent: string[] = [];
    for (let g = 0; g < 4; g++) bound.admit(1);
    for (const g of ["g1", "g2", "g3"]) bound.finished(1, () => sent.push(g));
    bound.admit(2);
    bound.finished(2, () => sent.push("g4"));
    expect(sent).toEqual(["g1", "g2", "g3"]);
    bound.forget(1); // g0 dropped for its age, or never started
    expect(sent).toEqual(["g1", "g2", "g3", "g4"]);
  });

  it("holds nothing a later step still has room for (S = 2: a long group may be sent at step 2)", () => {
    const bound = new AgeBound(2);
    const sent: string[] = [];
    for (let g = 0; g < 6; g++) bound.admit(2);
    for (const g of ["g1", "g2", "g3", "g4", "g5"]) bound.finished(2, () => sent.push(g));
    expect(sent).toEqual(["g1", "g2", "g3", "g4", "g5"]);
    bound.admit(3);
    bound.finished(3, () => sent.push("g6"));
    expect(bound.holding).toBe(1);
    bound.finished(2, () => sent.push("g0"));
    expect(sent.slice(5)).toEqual(["g0", "g6"]);
  });

  for (const [S, B] of [
    [0, 4],
    [1, 8],
    [2, 3],
  ] as const) {
    it(`a seeded stream under the capacity rule, S = ${S}, B = ${B}: every group trained within S versions`, () => {
      const strict = simulate(S, B, true, 0x5eed + S);
      expect(strict.violations).toBe(0);
      expect(strict.sent).toBe(strict.admitted);
      expect(Math.max(...strict.ages)).toBeLessThanOrEqual(S);
      if (S === 0) return; // synchronous: only one step's groups are ever admitted, none overtakes
      expect(strict.held).toBeGreaterThan(0);
      // The same run sending each group as it finishes: long groups are overtaken.
      expect(simulate(S, B, false, 0x5eed + S).violations).toBeGreaterThan(0);
    });
  }
});

/**
 * A stream of 60 × B groups: admitted while accepted + running + 1 ≤ (S + v + 1) × B, finished
 * in a random order (one group in eight runs much longer), received by a trainer that updates
 * (v + 1) once it has taken B more groups. A group is trained at version ⌊n ÷ B⌋ (n: its place in
 * arrival order), admitted at version a; its age is at most that difference.
 */
function simulate(S: number, B: number, bounded: boolean, seed: number) {
  const rng = mulberry32(seed);
  const bound = new AgeBound(B);
  const total = 60 * B;
  let v = 0;
  let admitted = 0;
  let accepted = 0;
  let received = 0;
  let violations = 0;
  let held = 0;
  const ages: number[] = [];
  const running: { admittedAt: number; work: number }[] = [];
  // A stream that stalls (a group held forever) ends the loop short of `total`.
  for (let tick = 0; received < total && tick < 100 * total; tick++) {
    // Admit what the capacity rule allows.
    while (admitted < total && accepted + running.length + 1 <= (S + v + 1) * B) {
      const admittedAt = v;
      running.push({
        admittedAt,
        work: rng() < 1 / 8 ? 20 + Math.floor(rng() * 40) : 1 + Math.floor(rng() * 4),
      });
      if (bounded) bound.admit(admittedAt + S);
      admitted++;
    }
    // One tick of play: each running group does one unit of work; those done finish in a random order.
    for (const g of running) g.work--;
    const done = running.filter((g) => g.work <= 0).sort(() => rng() - 0.5);
    for (const g of done) {
      running.splice(running.indexOf(g), 1);
      accepted++;
      const send = () => {
        const age = Math.floor(received / B) - g.admittedAt;
        ages.push(age);
        if (age > S) violations++;
        received++;
      };
      if (bounded) {
        bound.finished(g.admittedAt + S, send);
        held = Math.max(held, bound.holding);
      } else send();
    }
    // The trainer trains on its next B groups and updates.
    while (received >= (v + 1) * B) v++;
  }
  return { violations, sent: received, admitted, ages, held };
}

/** A small seeded generator (mulberry32), so the simulation is the same on every run. */
function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
