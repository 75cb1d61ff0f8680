// Batch delivery's states without a socket: playing (groups start while no weight update is
// open, finished ones wait for the filter), delivering (the kept groups' frames go out a slice
// per turn of the event loop), done (the verdict).
import { describe, expect, it } from "vitest";
import { DeliveredAges } from "../../src/server/delivery/ages.ts";
import { BatchDelivery, type BatchState } from "../../src/server/delivery/batch.ts";
import { FakeRollout, judged, registry, request, ScriptedPlay } from "../helpers/delivery.ts";

/** Lets every pending promise callback run (not timers or setImmediate). */
async function microtasks(): Promise<void> {
  for (let i = 0; i < 50; i++) await Promise.resolve();
}

function batchOf(groups: number, gate = { closed: false, used: false }) {
  const host = new FakeRollout();
  const play = new ScriptedPlay();
  const updates = Object.assign(gate, { current: { label: "", ordinal: 0 }, delivered: new DeliveredAges() });
  const batch = new BatchDelivery(host, play, { request: request(groups), registry, updates });
  // The state each group frame was queued in.
  const queuedIn: BatchState[] = [];
  const queue = host.queue.bind(host);
  host.queue = (group, frame, episodes) => {
    queuedIn.push(batch.state);
    queue(group, frame, episodes);
  };
  return { host, play, batch, gate, queuedIn };
}

describe("batch delivery", () => {
  it("holds the whole rollout at once; a group waits while a weight update is open", async () => {
    const { host, play, batch, gate } = batchOf(3, { closed: true, used: false });
    const run = batch.run();
    expect(batch.state).toBe("playing");
    expect(host.held).toBe(6);
    let started = false;
    const first = play.admit(0).then(() => {
      started = true;
    });
    await microtasks();
    expect(started).toBe(false);
    host.wake(); // a change that does not open the gate
    await microtasks();
    expect(started).toBe(false);
    gate.closed = false;
    host.wake();
    await first;
    await play.admit(1); // the gate is open: at once
    await play.admit(2);
    for (const g of [0, 1, 2]) play.finish(g, 2);
    play.end(0, [judged(0, "kept"), judged(1, "kept"), judged(2, "kept")]);
    await run;
    expect(batch.state).toBe("done");
  });

  it("sends nothing while playing, then the kept groups in group order, then is done", async () => {
    const { host, play, batch, queuedIn } = batchOf(3);
    const run = batch.run();
    for (const g of [2, 0, 1]) {
      await play.admit(g);
      play.finish(g, 2);
    }
    expect(host.queued).toEqual([]);
    expect(play.finalProgress).toBe(0);
    play.end(0, [judged(0, "kept"), judged(1, "dropped"), judged(2, "kept")]);
    const { verdict, groups } = await run;
    expect(batch.state).toBe("done");
    expect(queuedIn).toEqual(["delivering", "delivering"]);
    expect(play.finalProgress).toBe(1);
    expect(host.queuedGroups).toEqual([0, 2]);
    expect(host.buffered).toBe(2);
    expect(host.queued.map((f) => [f.kept, f.score, f.episodes.length])).toEqual([
      [true, 1, 2],
      [true, 1, 2],
    ]);
    // No weight update ever began: the frames carry no versions.
    expect(host.queued[0].min_version).toBeUndefined();
    expect(verdict).toMatchObject({
      type: "batch",
      rollout: "r",
      kept: [0, 2],
      dropped: [1],
      failed_groups: [],
    });
    expect(groups.map((g) => g.group_id)).toEqual([0, 1, 2]);
  });

  it("stays delivering across turns of the event loop while a large batch's frames are built", async () => {
    const { host, play, batch } = batchOf(40);
    const run = batch.run();
    for (let g = 0; g < 40; g++) {
      await play.admit(g);
      play.finish(g, 2);
    }
    play.end(
      0,
      Array.from({ length: 40 }, (_, g) => judged(g, "kept")),
    );
    await microtasks();
    // 15 frames, then the 16th waits for the next turn.
    expect(batch.state).toBe("delivering");
    expect(host.queued.length).toBe(15);
    await run;
    expect(batch.state).toBe("done");
    expect(host.queuedGroups).toEqual(Array.from({ length: 40 }, (_, g) => g));
  });

  it("marks its frames with versions once a weight update has begun", async () => {
    const { host, play, batch } = batchOf(1, { closed: false, used: true });
    const run = batch.run();
    await play.admit(0);
    play.finish(0, 2, 3);
    play.end(0, [judged(0, "kept")]);
    await run;
    expect(host.queued[0]).toMatchObject({ min_version: 3, max_version: 3 });
  });
});
