// The ages of the groups delivered while one version was in force (PROTOCOL.md "Staleness"):
// what `update_begun` reports for the step it closes. A group's age is the ordinal in force when
// it was delivered minus its min_version (0 when no turn of it carries a version yet), as the
// clients define it; a trainer that trains on a group later than that sees it older still.
import type { AgeSummary, GroupFrame } from "../../../protocol/messages.ts";

/**
 * The age of a group delivered in `frame` while ordinal `current` is in force. The frame's
 * min_version is the range its builder already walked; a frame without one was built before any
 * update, when every ordinal is 0.
 */
export function ageAt(current: number, frame: Pick<GroupFrame, "min_version">): number {
  return current - (frame.min_version ?? 0);
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
