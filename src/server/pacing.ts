// How a stream rollout paces its groups against the trainer's weight versions (PROTOCOL.md
// "Staleness"): groups kept in flight, and AReaL's and SkyRL's capacity rule, enforced when a
// group is admitted rather than by discarding finished work (facts/async-rl.md §1.1):
// accepted + running <= (max_staleness + v + 1) × groups_per_step, v counting the ordinals gained since
// the rollout began. accepted counts the groups delivered; running, the groups started and not
// finished. A group dropped by drop_older_than is not accepted: another takes its place.
import type { Admitted } from "../../protocol/messages.ts";
import type { PaceValues } from "../../protocol/settings.ts";
import type { UpdateCoordinator } from "./update-coordinator.ts";

/** ASYNC's settings by wire name (protocol/settings.ts), in_flight and groups_per_step resolved to numbers. */
export type PaceSettings = PaceValues;

export class StreamPacing {
  readonly settings: PaceSettings;
  private readonly updates: UpdateCoordinator;
  private readonly startOrdinal: number;
  private running = 0;
  private accepted = 0;
  /** The most accepted + running ever reached, and the capacity in force then (for tests and metrics). */
  peak = { occupancy: 0, capacity: 0 };

  constructor(settings: PaceSettings, updates: UpdateCoordinator) {
    this.settings = settings;
    this.updates = updates;
    this.startOrdinal = updates.current.ordinal;
  }

  /** Updates since the rollout began. */
  get version(): number {
    return this.updates.current.ordinal - this.startOrdinal;
  }

  get capacity(): number {
    const { max_staleness, groups_per_step } = this.settings;
    return max_staleness === null
      ? Number.POSITIVE_INFINITY
      : (max_staleness + this.version + 1) * groups_per_step;
  }

  /** Whether one more group may start now (the update gate, groups in flight, the staleness rule). */
  fits(): boolean {
    return (
      !this.updates.closed &&
      this.running < this.settings.in_flight &&
      this.accepted + this.running + 1 <= this.capacity
    );
  }

  /** A group starts: counted as running; returns the counts it was admitted under (its frame's `admitted`). */
  admit(): Admitted {
    this.running++;
    const capacity = this.capacity;
    const occupancy = this.accepted + this.running;
    if (occupancy > this.peak.occupancy) this.peak = { occupancy, capacity };
    return {
      version: this.version,
      accepted: this.accepted,
      running: this.running,
      capacity: Number.isFinite(capacity) ? capacity : 0,
    };
  }

  /** A group finished: delivered (accepted), or not (dropped for its age, or never played). */
  finished(delivered: boolean): void {
    this.running--;
    if (delivered) this.accepted++;
  }

  /** drop_older_than: whether a group whose oldest turn ran at ordinal `oldest` is too old to send. */
  tooOld(oldest: number | null): boolean {
    const limit = this.settings.drop_older_than;
    return limit !== null && oldest !== null && this.updates.current.ordinal - oldest > limit;
  }
}
