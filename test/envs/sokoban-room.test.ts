// Sokoban rooms are kept by seed and spec (a group's episodes reset on one seed): a room asked
// for again is the same room, and each caller gets its own copy to play on.
import { describe, expect, it } from "vitest";
import { generateRoom } from "../../envs/sokoban/room.ts";

describe("generateRoom", () => {
  const spec = { rows: 6, cols: 6, numBoxes: 1, searchDepth: 100 };

  it("gives the same room for a seed again, as a copy the caller may change", () => {
    const first = generateRoom(41, spec);
    const pristine = { ...first, fixed: first.fixed.slice(), state: first.state.slice() };
    first.state.fill(0);
    first.fixed.fill(0);
    const again = generateRoom(41, spec);
    expect(again).toEqual(pristine);
    expect(again.state).not.toBe(first.state);
  });

  it("keeps rooms apart by spec, not by seed alone", () => {
    const small = generateRoom(7, spec);
    const wide = generateRoom(7, { ...spec, cols: 8 });
    expect(small.cols).toBe(6);
    expect(wide.cols).toBe(8);
    expect(wide.state.length).toBe(48);
  });
});
