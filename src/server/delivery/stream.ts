// Stream delivery: each group goes to the outbox as soon as it finishes, behind the rollout's
// buffer bound and the staleness pacing (pacing.ts), and holds its share of the budget only from
// just before it starts. A group whose turns are older than drop_older_than allows is not sent,
// and another takes its place. Under strict_staleness a finished group may wait for one admitted
// before it (age-bound.ts). An endless stream plays each of its windows through one of these
// (endless.ts).
import type { EnvRegistry } from "../../../envs/registry.ts";
import type { Admitted } from "../../../protocol/messages.ts";
import type { BatchResult, EpisodeRecord } from "../../record/episode-record.ts";
import { type BatchRequest, groupTags } from "../../rollout/batch.ts";
import { groupFrame, versionRange } from "../group-frame.ts";
import { episodesBytes } from "../memory-costs.ts";
import type { ServerMetrics } from "../metrics.ts";
import { type PaceSettings, StreamPacing } from "../pacing.ts";
import type { UpdateCoordinator } from "../update-coordinator.ts";
import { AgeBound } from "./age-bound.ts";
import { ageAt } from "./ages.ts";
import type { Delivered, Delivery, DeliveryHost, WindowPlay } from "./host.ts";
import { batchVerdict } from "./verdicts.ts";

/**
 * Where one group of a stream stands:
 * - pacing: waiting for a place (the buffer bound, the update gate, groups in flight, max_staleness);
 * - waiting_room: holding its place, waiting for room in the episode and memory budget;
 * - playing; and then one of
 * - held: finished and accepted, waiting for a group admitted before it (strict_staleness);
 * - queued: its frame is in the outbox (an accepted group);
 * - stale_dropped: too old for drop_older_than, not sent;
 * - not_started: cancelled while it waited (its place given back).
 */
export type StreamGroupState =
  | "pacing"
  | "waiting_room"
  | "playing"
  | "held"
  | "queued"
  | "stale_dropped"
  | "not_started";

export interface StreamSetup {
  request: BatchRequest;
  registry: EnvRegistry;
  updates: UpdateCoordinator;
  pace: PaceSettings;
  maxBufferedGroups: number;
  metrics: Pick<ServerMetrics, "staleGroupsDropped">;
  /** An endless stream's group frames name their window. */
  windowed: boolean;
}

interface GroupSlot {
  state: StreamGroupState;
  /** The counts the group was admitted under (its frame's `admitted`). */
  admitted: Admitted | null;
  /** strict_staleness: the step by which it must be trained (age-bound.ts). */
  deadline: number | null;
  /** strict_staleness: resolves once a held group's frame is queued. */
  sent: Promise<void> | null;
}

export class StreamDelivery implements Delivery {
  readonly pacing: StreamPacing;
  private readonly host: DeliveryHost;
  private readonly player: WindowPlay;
  private readonly setup: StreamSetup;
  private readonly tags: string[];
  /** Every group admitted so far, until its window's verdict is built (a finite stream: until the end). */
  private readonly groups = new Map<number, GroupSlot>();
  /** strict_staleness's order of sending (null: each group goes as it finishes). */
  private readonly bound: AgeBound | null;

  constructor(host: DeliveryHost, player: WindowPlay, setup: StreamSetup) {
    this.host = host;
    this.player = player;
    this.setup = setup;
    this.pacing = new StreamPacing(setup.pace, setup.updates);
    this.tags = groupTags(setup.request);
    const { strict_staleness, max_staleness, groups_per_step } = setup.pace;
    this.bound = strict_staleness && max_staleness !== null ? new AgeBound(groups_per_step) : null;
  }

  /** Where group `group` stands; undefined before it asked to start (or once its window's verdict is built). */
  stateOf(group: number): StreamGroupState | undefined {
    return this.groups.get(group)?.state;
  }

  async run(): Promise<Delivered> {
    const result = await this.window(0);
    await this.sent(0, this.tags.length);
    this.player.progress(true);
    const stale = this.staleDropped(0, this.tags.length);
    return { verdict: batchVerdict(this.host.id, result, stale), groups: result.groups };
  }

  /** Plays window `w`; `afterAdmission` runs once each of its groups has started or given up. */
  window(w: number, afterAdmission: () => void = () => {}): Promise<BatchResult> {
    return this.player.play(w, {
      admitGroup: (group) => this.admit(group, afterAdmission),
      onGroup: (group, episodes) => this.finished(group, episodes, w),
    });
  }

  /** Resolves once none of groups `first` to `first + count - 1` is held (its verdict may follow them). */
  async sent(first: number, count: number): Promise<void> {
    for (let g = first; g < first + count; g++) await this.groups.get(g)?.sent;
  }

  /** Groups `first` to `first + count - 1` dropped for their age; their states are forgotten. */
  settle(first: number, count: number): Set<number> {
    const stale = this.staleDropped(first, count);
    for (let g = first; g < first + count; g++) this.groups.delete(g);
    return stale;
  }

  private staleDropped(first: number, count: number): Set<number> {
    const stale = new Set<number>();
    for (let g = first; g < first + count; g++)
      if (this.groups.get(g)?.state === "stale_dropped") stale.add(g);
    return stale;
  }

  private async admit(group: number, afterAdmission: () => void): Promise<void> {
    const { host, pacing, setup } = this;
    const slot: GroupSlot = { state: "pacing", admitted: null, deadline: null, sent: null };
    this.groups.set(group, slot);
    // The place is taken in the same turn as the check, so concurrent workers never pass the
    // buffer bound or the staleness rule together.
    const placed = await host.until(() => {
      if (host.buffered >= setup.maxBufferedGroups || !pacing.fits()) return false;
      host.takePlace();
      slot.admitted = pacing.admit();
      if (this.bound && setup.pace.max_staleness !== null) {
        slot.deadline = slot.admitted.version + setup.pace.max_staleness;
        this.bound.admit(slot.deadline);
      }
      slot.state = "waiting_room";
      return true;
    });
    const size = setup.request.groupSize;
    const tag = this.tags[group % this.tags.length];
    const bytes = episodesBytes(setup.registry, [{ tag, groups: 1 }], size);
    const started = placed && (await host.waitForRoom(size, bytes, () => host.meter.admit(group, bytes)));
    if (started) slot.state = "playing";
    else {
      if (placed) {
        // Cancelled while waiting for the budget: the group never starts.
        host.returnPlace();
        pacing.finished(false);
        this.forget(slot);
      }
      slot.state = "not_started";
    }
    afterAdmission();
  }

  private finished(group: number, episodes: EpisodeRecord[], w: number): void {
    const { host, pacing, setup } = this;
    const slot = this.groups.get(group);
    const admitted = slot?.admitted ?? undefined;
    // Too old for drop_older_than: not sent, and not accepted (another group takes its place).
    if (pacing.tooOld(versionRange(episodes)?.min ?? null)) {
      pacing.finished(false);
      if (slot) {
        slot.state = "stale_dropped";
        this.forget(slot);
      }
      setup.metrics.staleGroupsDropped.inc();
      host.meter.release(group);
      host.discard(episodes.length);
      return;
    }
    pacing.finished(true);
    // Built now: its versions are those it finished with. Its place in the buffer was taken when
    // it was admitted.
    const frame = groupFrame(host.id, group, episodes, null, null, {
      versions: setup.updates.used,
      window: setup.windowed ? w : undefined,
      admitted: setup.pace.max_staleness !== null ? admitted : undefined,
    });
    // A held group's play stays on the memory meter until its frame is queued (and charged).
    const send = () => {
      host.meter.release(group);
      setup.updates.delivered.add(ageAt(setup.updates.current.ordinal, frame));
      if (slot) slot.state = "queued";
      host.queue(group, frame, episodes.length);
    };
    const { bound } = this;
    const deadline = slot?.deadline ?? null;
    if (!bound || !slot || deadline === null) {
      send();
      return;
    }
    slot.state = "held";
    slot.sent = new Promise<void>((resolve) =>
      bound.finished(deadline, () => {
        send();
        resolve();
      }),
    );
  }

  /** A group admitted under strict_staleness that will never be sent gives up its claim. */
  private forget(slot: GroupSlot): void {
    if (this.bound && slot.deadline !== null) this.bound.forget(slot.deadline);
  }
}
