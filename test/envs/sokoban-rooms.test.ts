// A group's members reset with one seed and get one room generated for all of them
// (envs/sokoban/sokoban-env.ts): each must still play its own copy.
import { describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";

describe("Sokoban rooms shared by seed", () => {
  it("gives every reset with a seed its own room: one member's moves never show in another's", () => {
    const tag = createRegistry().tag("CoordSokoban");
    const first = tag.make();
    const start = first.reset(1234);
    // Move until the board changes (an action that bumps a wall leaves it as it was).
    let moved = start;
    for (const action of [1, 2, 3, 4]) {
      if (moved !== start) break;
      first.step(action);
      moved = first.render();
    }
    expect(moved).not.toBe(start);
    const second = tag.make();
    expect(second.reset(1234)).toBe(start);
    expect(first.render()).toBe(moved);
    // And a member reset after the others have played starts where they started.
    for (const action of [1, 2, 3, 4]) second.step(action);
    expect(tag.make().reset(1234)).toBe(start);
  });
});
