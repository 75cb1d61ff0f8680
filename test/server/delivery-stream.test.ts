// Stream delivery's group states without a socket: pacing (buffer bound, groups in flight,
// max_staleness), waiting_room (budget), playing, then queued (after held, under
// strict_staleness), stale_dropped or not_started.
// Weight updates go through the server's UpdateCoordinator and a versioned built-in policy.
import client from "prom-client";
import { describe, expect, it } from "vitest";
import { StreamDelivery } from "../../src/server/delivery/stream.ts";
import type { PaceSettings } from "../../src/server/pacing.ts";
import { Session } from "../../src/server/session.ts";
import { UpdateCoordinator } from "../../src/server/update-coordinator.ts";
import {
  FakeRollout,
  judged,
  noMemory,
  paceOf,
  registry,
  request,
  ScriptedPlay,
} from "../helpers/delivery.ts";
import { VersionedPolicy } from "../helpers/versioned-policy.ts";

async function microtasks(): Promise<void> {
  for (let i = 0; i < 50; i++) await Promise.resolve();
}

const OPEN: PaceSettings = paceOf();

function streamOf(groups: number, pace: Partial<PaceSettings> = {}, maxBufferedGroups = 16) {
  const host = new FakeRollout();
  const play = new ScriptedPlay();
  const updates = new UpdateCoordinator(new VersionedPolicy(), null, { maxUpdateMs: 600_000 });
  // The rollout wakes its waiting groups on every change of the gate or the version.
  updates.onChange(() => host.wake());
  const staleGroupsDropped = new client.Counter({ name: "stale", help: "stale", registers: [] });
  const stream = new StreamDelivery(host, play, {
    request: request(groups),
    registry,
    updates,
    pace: { ...OPEN, ...pace },
    maxBufferedGroups,
    metrics: { staleGroupsDropped },
    windowed: false,
  });
  const trainer = new Session(() => {}, noMemory());
  updates.claimTrainer(trainer);
  /** A weight update from begin to end: the engines then run `ordinal`. */
  const update = async (ordinal: number) => {
    await updates.begin(trainer, `u${ordinal}`, undefined);
    await updates.end(trainer, `u${ordinal}`, { label: `v${ordinal}`, ordinal });
  };
  return { host, play, stream, update, updates, trainer, staleGroupsDropped };
}

describe("stream delivery", () => {
  it("a group waits for a buffer place, then for budget room, then plays and is queued at once", async () => {
    const { host, play, stream } = streamOf(2, {}, 1);
    host.room = false;
    const run = stream.run();
    const first = play.admit(0);
    expect(stream.stateOf(0)).toBe("waiting_room");
    const second = play.admit(1);
    expect(stream.stateOf(1)).toBe("pacing");
    await microtasks();
    expect(host.waitingForRoom).toBe(1);
    host.grantRoom();
    await first;
    expect(stream.stateOf(0)).toBe("playing");
    expect(host.held).toBe(2);
    play.finish(0, 2);
    expect(stream.stateOf(0)).toBe("queued");
    expect(host.queuedGroups).toEqual([0]);
    expect(host.queued[0].kept).toBeNull();
    // Group 0 keeps its place until the client acknowledges it.
    await microtasks();
    expect(stream.stateOf(1)).toBe("pacing");
    host.acknowledge();
    await microtasks();
    expect(stream.stateOf(1)).toBe("waiting_room");
    host.grantRoom();
    await second;
    play.finish(1, 2);
    play.end(0, [judged(0, "kept"), judged(1, "dropped")]);
    const { verdict } = await run;
    expect(play.finalProgress).toBe(1);
    expect(verdict).toMatchObject({ kept: [0], dropped: [1], failed_groups: [] });
    expect(verdict.stale_dropped).toBeUndefined();
  });

  it("max_staleness holds a group in pacing until a weight update raises the capacity", async () => {
    const { host, play, stream, update } = streamOf(2, { max_staleness: 0, groups_per_step: 1 });
    void stream.run();
    await play.admit(0);
    expect(stream.stateOf(0)).toBe("playing");
    const second = play.admit(1);
    expect(stream.stateOf(1)).toBe("pacing");
    play.finish(0, 2);
    await microtasks();
    // Accepted 1 + running 0 + 1 is over (0 + 0 + 1) × 1.
    expect(stream.stateOf(1)).toBe("pacing");
    await update(1);
    await second;
    expect(stream.stateOf(1)).toBe("playing");
    play.finish(1, 2, 1);
    expect(host.queued.map((f) => f.admitted)).toEqual([
      { version: 0, accepted: 0, running: 1, capacity: 1 },
      { version: 1, accepted: 1, running: 1, capacity: 2 },
    ]);
  });

  it("drops a group too old for drop_older_than and sends the next one", async () => {
    const { host, play, stream, update, staleGroupsDropped } = streamOf(2, { drop_older_than: 0 });
    const run = stream.run();
    await play.admit(0);
    await update(1);
    play.finish(0, 2, 0);
    expect(stream.stateOf(0)).toBe("stale_dropped");
    expect(host.discarded).toEqual([2]);
    expect(host.buffered).toBe(0);
    expect((await staleGroupsDropped.get()).values[0].value).toBe(1);
    await play.admit(1);
    play.finish(1, 2, 1);
    expect(stream.stateOf(1)).toBe("queued");
    expect(host.queuedGroups).toEqual([1]);
    expect(host.queued[0]).toMatchObject({ min_version: 1, max_version: 1 });
    play.end(0, [judged(0, "kept"), judged(1, "kept")]);
    const { verdict } = await run;
    expect(verdict).toMatchObject({ kept: [1], dropped: [], stale_dropped: [0] });
  });

  it("a group cancelled while it waits never starts and gives back its place", async () => {
    const { host, play, stream } = streamOf(2, { in_flight: 1 });
    host.room = false;
    void stream.run();
    const first = play.admit(0);
    const second = play.admit(1);
    expect(stream.stateOf(0)).toBe("waiting_room");
    // One group in flight at most.
    expect(stream.stateOf(1)).toBe("pacing");
    expect(stream.pacing.fits()).toBe(false);
    await microtasks();
    host.cancel();
    await Promise.all([first, second]);
    expect(stream.stateOf(0)).toBe("not_started");
    expect(stream.stateOf(1)).toBe("not_started");
    expect(host.buffered).toBe(0);
    expect(host.held).toBe(0);
    expect(stream.pacing.fits()).toBe(true);
  });

  it("forgets a window's groups once its verdict has them", async () => {
    const { play, stream, update } = streamOf(2, { drop_older_than: 0 });
    void stream.run();
    await play.admit(0);
    await play.admit(1);
    await update(1);
    play.finish(0, 2, 0);
    play.finish(1, 2, 1);
    expect(stream.settle(0, 2)).toEqual(new Set([0]));
    expect(stream.stateOf(0)).toBeUndefined();
    expect(stream.stateOf(1)).toBeUndefined();
  });

  for (const strict of [true, false]) {
    it(`strict_staleness ${strict}: a group that overtook a long one ${strict ? "is held until it is sent" : "goes at once"}`, async () => {
      // S = 1, B = 1: groups 0 and 1 are admitted at version 0 (due by step 1), group 2 at 1.
      const pace = { max_staleness: 1, groups_per_step: 1, strict_staleness: strict };
      const { host, play, stream, update } = streamOf(3, pace);
      const run = stream.run();
      await play.admit(0);
      await play.admit(1);
      play.finish(1, 2);
      expect(host.queuedGroups).toEqual([1]);
      await update(1);
      await play.admit(2);
      play.finish(2, 2, 1);
      // Sent now, group 2 would be the trainer's step 1 and push group 0 to step 2 (age 2).
      expect(stream.stateOf(2)).toBe(strict ? "held" : "queued");
      expect(host.queuedGroups).toEqual(strict ? [1] : [1, 2]);
      play.finish(0, 2, 0);
      expect(host.queuedGroups).toEqual(strict ? [1, 0, 2] : [1, 2, 0]);
      expect(stream.stateOf(2)).toBe("queued");
      play.end(0, [judged(0, "kept"), judged(1, "kept"), judged(2, "kept")]);
      const { verdict } = await run;
      expect(verdict.kept).toEqual([0, 1, 2]);
    });
  }

  it("update_begun's ages: the groups delivered under the version it closes, aged then", async () => {
    const { play, stream, updates, trainer } = streamOf(3);
    void stream.run();
    await play.admit(0);
    await play.admit(1);
    play.finish(0, 2);
    let begun = await updates.begin(trainer, "u1", undefined);
    expect(begun.ages).toEqual({ groups: 1, min: 0, max: 0, mean: 0 });
    await updates.end(trainer, "u1", { label: "v1", ordinal: 1 });
    begun = await updates.begin(trainer, "u2", undefined);
    expect(begun.ages).toBeUndefined(); // nothing delivered under version 1
    await updates.end(trainer, "u2", { label: "v2", ordinal: 2 });
    await play.admit(2);
    play.finish(1, 2, 0);
    play.finish(2, 2, 2);
    begun = await updates.begin(trainer, "u3", undefined);
    expect(begun.ages).toEqual({ groups: 2, min: 0, max: 2, mean: 1 });
  });
});
