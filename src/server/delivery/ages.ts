// The ages of the groups delivered while one version was in force (PROTOCOL.md "Staleness"):
// what `update_begun` reports for the step it closes. A group's age is the ordinal in force when
// it was delivered minus its min_version (0 when no turn of it carries a version yet), as the
// clients define it; a trainer that trains on a group later than that sees it older still.
import type { AgeSummary } from "../../../protocol/messages.ts";
import type { EpisodeRecord } from "../../record/episode-record.ts";
import { versionRange } from "../group-frame.ts";

/** The age of a group of `episodes` delivered while ordinal `current` is in force. */
export function ageAt(current: number, episodes: readonly EpisodeRecord[]): number {
  return current - (versionRange(episodes)?.min ?? 0);
}

export class DeliveredAges {
  private groups = 0;
  private min = Number.POSITIVE_INFINITY;
  private max = 0;
  private sum = 0;

  add(age: number): void {
    this.groups++;
    this.min = Math.min(this.min, age);
    this.max = Math.max(this.max, age);
    this.sum += age;
  }

  /** The summary since the last take (null when no group was delivered), and a fresh start. */
  take(): AgeSummary | null {
    if (this.groups === 0) return null;
    const summary = { groups: this.groups, min: this.min, max: this.max, mean: this.sum / this.groups };
    this.groups = 0;
    this.min = Number.POSITIVE_INFINITY;
    this.max = 0;
    this.sum = 0;
    return summary;
  }
}
