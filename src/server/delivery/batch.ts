// Batch delivery: the rollout holds its whole share of the budget from the start (its admission
// found room for it), its groups start while no weight update is open, and once the filter has
// decided, the kept groups go to the outbox a slice at a time, then the verdict.
import { setImmediate as nextTurn } from "node:timers/promises";
import type { EnvRegistry } from "../../../envs/registry.ts";
import type { BatchResult, EpisodeRecord } from "../../record/episode-record.ts";
import type { BatchRequest } from "../../rollout/batch.ts";
import { groupFrame } from "../group-frame.ts";
import { episodesBytes } from "../memory-costs.ts";
import type { UpdateCoordinator } from "../update-coordinator.ts";
import { ageAt } from "./ages.ts";
import type { Delivered, Delivery, DeliveryHost, WindowPlay } from "./host.ts";
import { batchVerdict } from "./verdicts.ts";

/** Group frames built between two turns of the event loop when a batch is delivered. */
const FRAMES_PER_SLICE = 16;

/**
 * - playing: groups start as the weight-update gate lets them, finished ones wait for the filter;
 * - delivering: the kept groups' frames go to the outbox, a slice per turn of the event loop;
 * - done: the verdict is ready.
 */
export type BatchState = "playing" | "delivering" | "done";

export interface BatchSetup {
  request: BatchRequest;
  registry: EnvRegistry;
  /** The gate (closed while a weight update is open) and whether versions appear on the wire. */
  updates: Pick<UpdateCoordinator, "closed" | "used" | "current" | "delivered">;
}

export class BatchDelivery implements Delivery {
  state: BatchState = "playing";
  private readonly host: DeliveryHost;
  private readonly player: WindowPlay;
  private readonly setup: BatchSetup;
  /** Finished groups' episodes, until the filter says which are sent. */
  private readonly finished = new Map<number, EpisodeRecord[]>();

  constructor(host: DeliveryHost, player: WindowPlay, setup: BatchSetup) {
    this.host = host;
    this.player = player;
    this.setup = setup;
  }

  async run(): Promise<Delivered> {
    const { host, setup } = this;
    const { request } = setup;
    host.hold(request.tags.reduce((n, t) => n + t.groups, 0) * request.groupSize);
    // What its play holds against the memory budget: every episode, from now.
    host.meter.admit(-1, episodesBytes(setup.registry, request.tags, request.groupSize));
    const result = await this.player.play(0, {
      admitGroup: () => this.admit(),
      onGroup: (group, episodes) => {
        this.finished.set(group, episodes);
      },
    });
    this.player.progress(true);
    this.state = "delivering";
    await this.deliver(result);
    this.state = "done";
    return { verdict: batchVerdict(host.id, result, new Set()), groups: result.groups };
  }

  /** A group waits only while a weight update is open. */
  private async admit(): Promise<void> {
    const { updates } = this.setup;
    if (updates.closed) await this.host.until(() => !updates.closed);
  }

  private async deliver(result: BatchResult): Promise<void> {
    let built = 0;
    for (const g of result.groups) {
      if (!g.kept) continue;
      // Frames of a large batch are built a few at a time, so other clients are served meanwhile.
      if (++built % FRAMES_PER_SLICE === 0) await nextTurn();
      this.host.takePlace();
      const episodes = this.finished.get(g.group_id) ?? [];
      const frame = groupFrame(this.host.id, g.group_id, episodes, true, g.score, {
        versions: this.setup.updates.used,
      });
      this.setup.updates.delivered.add(ageAt(this.setup.updates.current.ordinal, frame));
      this.host.queue(g.group_id, frame, episodes.length);
    }
    this.finished.clear();
  }
}
