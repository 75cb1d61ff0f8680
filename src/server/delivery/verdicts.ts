// The verdict frames a delivery ends with: a finite rollout's `batch` frame and an endless
// stream's `window` frames, their group lists taken from the filter's result.
import type { BatchFrame, WindowFrame } from "../../../protocol/messages.ts";
import type { BatchResult } from "../../record/episode-record.ts";

type GroupLists = Pick<BatchFrame, "kept" | "dropped" | "failed_groups" | "not_started" | "stale_dropped">;

/** A verdict's group lists; `stale` groups (never sent) leave kept and dropped for their own list. */
function verdictLists(result: BatchResult, stale: ReadonlySet<number>, offset = 0): GroupLists {
  const ids = (pick: (g: BatchResult["groups"][number]) => boolean) =>
    result.groups.filter(pick).map((g) => g.group_id + offset);
  const sent = (ids: number[]) => ids.filter((g) => !stale.has(g));
  const mine = ids(() => true).filter((g) => stale.has(g));
  return {
    kept: sent(ids((g) => g.kept)),
    dropped: sent(ids((g) => !g.kept && !g.failed)),
    failed_groups: ids((g) => g.failed),
    // Cancelled before they started: no group frame comes for these (they are in failed_groups).
    ...(result.notStarted.length > 0 ? { not_started: result.notStarted.map((g) => g + offset) } : {}),
    ...(mine.length > 0 ? { stale_dropped: mine } : {}),
  };
}

/** A verdict's fields after its header, in the order they have always had: clients see the same bytes. */
function verdictBody(result: BatchResult, stale: ReadonlySet<number>, first = 0) {
  const { kept, dropped, failed_groups, ...after } = verdictLists(result, stale, first);
  return {
    kept,
    dropped,
    failed_groups,
    metrics: result.metrics,
    episodes: result.episodes.length,
    failed: result.failed,
    ...after,
  };
}

/** A finite rollout's verdict; `stale`: its groups dropped for their age. */
export function batchVerdict(rollout: string, result: BatchResult, stale: ReadonlySet<number>): BatchFrame {
  return { type: "batch", rollout, ...verdictBody(result, stale) };
}

/** The verdict of window `w` of an endless stream, its groups numbered from w × perWindow. */
export function windowVerdict(
  rollout: string,
  w: number,
  perWindow: number,
  result: BatchResult,
  stale: ReadonlySet<number>,
): WindowFrame {
  const first = w * perWindow;
  return {
    type: "window",
    rollout,
    window: w,
    first,
    groups: perWindow,
    ...verdictBody(result, stale, first),
  };
}
