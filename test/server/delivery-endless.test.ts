// Endless delivery's states without a socket: the stream plays (windows start one after
// another), stops (cancelled or out of seeds, the windows in flight finish), is done; each window
// is admitting, then draining once all its groups are admitted (the next window starts), then
// done once its verdict is queued.
import client from "prom-client";
import { describe, expect, it } from "vitest";
import { MAX_SEED } from "../../protocol/messages.ts";
import { EndlessDelivery } from "../../src/server/delivery/endless.ts";
import { StreamDelivery } from "../../src/server/delivery/stream.ts";
import { UpdateCoordinator } from "../../src/server/update-coordinator.ts";
import { FakeRollout, judged, paceOf, registry, request, ScriptedPlay } from "../helpers/delivery.ts";
import { VersionedPolicy } from "../helpers/versioned-policy.ts";

async function microtasks(): Promise<void> {
  for (let i = 0; i < 50; i++) await Promise.resolve();
}

/** An endless stream of two groups per window. */
function endlessOf(seed = 0) {
  const host = new FakeRollout();
  const play = new ScriptedPlay();
  const updates = new UpdateCoordinator(new VersionedPolicy(), null, { maxUpdateMs: 600_000 });
  const stream = new StreamDelivery(host, play, {
    request: request(2, 2, seed),
    registry,
    updates,
    pace: paceOf(),
    maxBufferedGroups: 16,
    metrics: { staleGroupsDropped: new client.Counter({ name: "stale", help: "stale", registers: [] }) },
    windowed: true,
  });
  const endless = new EndlessDelivery(host, play, stream, seed, 2);
  return { host, play, stream, endless };
}

describe("endless delivery", () => {
  it("starts window w + 1 once window w's groups are admitted, and sends each window's verdict when it ends", async () => {
    const { host, play, endless } = endlessOf();
    void endless.run();
    expect(endless.state).toBe("playing");
    expect(endless.windowState(0)).toBe("admitting");
    expect(endless.windowState(1)).toBeUndefined();
    await play.admit(0, 0);
    await microtasks();
    expect(endless.windowState(0)).toBe("admitting");
    expect(play.playing(1)).toBe(false);
    await play.admit(1, 0);
    expect(endless.windowState(0)).toBe("draining");
    await microtasks();
    expect(play.playing(1)).toBe(true);
    expect(endless.windowState(1)).toBe("admitting");
    // Window 1's groups are 2 and 3; frames name their window.
    await play.admit(2, 1);
    play.finish(2, 2, 0, 1);
    play.finish(0, 2, 0, 0);
    expect(host.queued.map((f) => [f.group, f.window])).toEqual([
      [2, 1],
      [0, 0],
    ]);
    play.finish(1, 2, 0, 0);
    play.end(0, [judged(0, "kept"), judged(1, "dropped")]);
    await microtasks();
    expect(endless.windowState(0)).toBe("done");
    expect(host.windows).toEqual([
      expect.objectContaining({ type: "window", window: 0, first: 0, groups: 2, kept: [0], dropped: [1] }),
    ]);
    expect(endless.windowState(1)).toBe("admitting");
  });

  it("stops on cancel, lets the windows in flight end, then counts them in its batch frame", async () => {
    const { host, play, endless } = endlessOf();
    const run = endless.run();
    await play.admit(0, 0);
    await play.admit(1, 0);
    await microtasks();
    const waiting = play.admit(2, 1);
    host.cancel();
    await waiting;
    await microtasks();
    expect(endless.state).toBe("stopping");
    expect(play.playing(2)).toBe(false);
    play.finish(0, 2, 0, 0);
    play.finish(1, 2, 0, 0);
    play.end(0, [judged(0, "kept"), judged(1, "kept")]);
    await microtasks();
    expect(endless.state).toBe("stopping");
    play.end(1, [judged(0, "failed"), judged(1, "failed")]);
    const { verdict, groups } = await run;
    expect(endless.state).toBe("done");
    expect(play.finalProgress).toBe(1);
    expect(groups).toEqual([]);
    expect(verdict).toEqual({
      type: "batch",
      rollout: "r",
      kept: [],
      dropped: [],
      failed_groups: [],
      metrics: { "rollgym/windows": 2 },
      episodes: 4,
      failed: 0,
      windows: 2,
    });
    expect(host.windows.map((w) => [w.window, w.kept, w.failed_groups])).toEqual([
      [0, [0, 1], []],
      [1, [], [2, 3]],
    ]);
  });

  it("stops where the next window's seeds would pass the largest seed", async () => {
    const { play, endless } = endlessOf(MAX_SEED - 3);
    const run = endless.run();
    for (const [group, w] of [
      [0, 0],
      [1, 0],
      [2, 1],
      [3, 1],
    ]) {
      await microtasks();
      await play.admit(group, w);
    }
    await microtasks();
    expect(endless.state).toBe("stopping");
    expect(play.playing(2)).toBe(false);
    play.end(0, []);
    play.end(1, []);
    const { verdict } = await run;
    expect(endless.state).toBe("done");
    expect(verdict.windows).toBe(2);
  });
});
