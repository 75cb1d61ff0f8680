// An endless stream as Watch keeps it (src/server/web/client/windows.ts): a group's versions
// come from its turns' stamps, its age from its window's version, and the page keeps only the
// last KEPT_WINDOWS windows and their groups however many arrive.
import { describe, expect, it } from "vitest";
import type { EpisodeRecord } from "../../src/record/episode-record.ts";
import type { GroupView } from "../../src/server/web/client/records.ts";
import {
  addEndlessGroup,
  endlessProgress,
  endlessView,
  judgeWindow,
  KEPT_WINDOWS,
  PLAYING_WINDOWS,
} from "../../src/server/web/client/windows.ts";

/** A group of one episode whose turns were stamped with these (dispatch, completion) ordinals. */
function group(id: number, stamps: [number, number][]): GroupView {
  const turns = stamps.map(([dispatch, completion]) => ({ version: { dispatch, completion } }));
  const episode = { env_id: id, turns } as unknown as EpisodeRecord;
  return { group: id, tag: "Bandit", seed: id, episodes: [episode], verdict: "pending", score: null };
}

const windowFrame = (w: number, kept: number[], dropped: number[], ordinal: number) => ({
  type: "watch_window",
  stream: 1,
  rollout: "r",
  window: w,
  first: w * 2,
  groups: 2,
  kept,
  dropped,
  failed_groups: [],
  metrics: {},
  episodes: 2,
  failed: 0,
  version: { label: `step-${ordinal}`, ordinal },
});

describe("an endless stream in Watch", () => {
  it("gives each group its turns' versions and, with its window's verdict, its age", () => {
    const e = endlessView(2);
    const groups = new Map<number, GroupView>();
    addEndlessGroup(
      e,
      groups,
      group(0, [
        [0, 0],
        [0, 1],
      ]),
    );
    addEndlessGroup(e, groups, group(1, [[1, 1]]));
    expect(groups.get(0)).toMatchObject({ versions: { min: 0, max: 1 }, age: null, verdict: "pending" });
    judgeWindow(e, groups, windowFrame(0, [1], [0], 2));
    expect(groups.get(0)).toMatchObject({ verdict: "dropped", age: 2 });
    expect(groups.get(1)).toMatchObject({ verdict: "kept", age: 1 });
    expect(e.windows[0]).toMatchObject({ kept: 1, dropped: 1, ages: { min: 1, max: 2 } });
    expect(endlessProgress(e)).toBe("2 groups · 1 windows");
  });

  it("keeps the last KEPT_WINDOWS windows and their groups, and the groups still playing", () => {
    const e = endlessView(2);
    const groups = new Map<number, GroupView>();
    const windows = 3 * KEPT_WINDOWS;
    for (let w = 0; w < windows; w++) {
      addEndlessGroup(e, groups, group(2 * w, [[w, w]]));
      addEndlessGroup(e, groups, group(2 * w + 1, [[w, w]]));
      judgeWindow(e, groups, windowFrame(w, [2 * w], [2 * w + 1], w));
    }
    // The next window's groups, not yet judged.
    addEndlessGroup(e, groups, group(2 * windows, [[windows, windows]]));
    expect(e.windows.map((w) => w.window)).toEqual(
      Array.from({ length: KEPT_WINDOWS }, (_, i) => windows - KEPT_WINDOWS + i),
    );
    expect([...groups.keys()].sort((a, b) => a - b)).toEqual(
      Array.from({ length: 2 * KEPT_WINDOWS + 1 }, (_, i) => 2 * (windows - KEPT_WINDOWS) + i),
    );
    expect(endlessProgress(e)).toBe(`${2 * windows + 1} groups · ${windows} windows`);
  });

  it("lists windows by number whatever order their verdicts come in", () => {
    const e = endlessView(2);
    const groups = new Map<number, GroupView>();
    for (const w of [1, 0, 3, 2]) judgeWindow(e, groups, windowFrame(w, [], [], 0));
    expect(e.windows.map((w) => w.window)).toEqual([0, 1, 2, 3]);
  });

  it("forgets the oldest groups past its bound when window verdicts were lost", () => {
    const e = endlessView(2);
    const groups = new Map<number, GroupView>();
    for (let g = 0; g < 1000; g++) addEndlessGroup(e, groups, group(g, [[0, 0]]));
    expect(groups.size).toBeLessThanOrEqual((KEPT_WINDOWS + PLAYING_WINDOWS) * 2);
    expect(Math.max(...groups.keys())).toBe(999);
  });
});
