// What a delivery (batch.ts, stream.ts, endless.ts) works with: its rollout, which keeps the
// episode budget, the buffer of unacknowledged groups and the cancellation (rollouts.ts), and
// the play of a window of groups, the same in every mode (rollout-play.ts). Tests give fakes of both.
import type { BatchFrame, GroupFrame, WindowFrame } from "../../../protocol/messages.ts";
import type { BatchResult, EpisodeRecord, GroupResult } from "../../record/episode-record.ts";
import type { PlayMeter } from "../memory-costs.ts";

/** The rollout as its delivery sees it. */
export interface DeliveryHost {
  readonly id: string;
  /** Aborts when the rollout is cancelled (or failed). */
  readonly signal: AbortSignal;
  /** Groups holding a place in the buffer: started or finished and not acknowledged (stream), queued and not acknowledged (batch). */
  readonly buffered: number;
  /** What the rollout's play holds against the memory budget. */
  readonly meter: PlayMeter;
  /**
   * Resolves true once `ready()` holds, or false once the rollout is cancelled. `ready` is asked
   * again after each acknowledgement, cancel or weight-update change, so it may take what it
   * checked in the same turn.
   */
  until(ready: () => boolean): Promise<boolean>;
  /** Holds `episodes` of the episode budget now (a batch's whole rollout, which its admission found room for). */
  hold(episodes: number): void;
  /**
   * Waits for room in the budget for one group's `episodes` and `bytes` and holds them; `held`
   * runs in the step that holds them. False when the rollout is cancelled first.
   */
  waitForRoom(episodes: number, bytes: number, held: () => void): Promise<boolean>;
  /** A group takes a place in the buffer (its acknowledgement gives it back). */
  takePlace(): void;
  /** A group cancelled before it started gives its place back (the cancel has woken every waiter). */
  returnPlace(): void;
  /** Queues a finished group's frame; its `episodes` move from the rollout's hold to the group's. */
  queue(group: number, frame: GroupFrame, episodes: number): void;
  /** A finished group that goes no further: its place and its `episodes` are freed. */
  discard(episodes: number): void;
  /** Queues an endless stream's window verdict, kept to send again on resume. */
  sendWindow(verdict: WindowFrame): void;
}

/** What a delivery decides for each group; groups are numbered across windows (window × groups per window + local). */
export interface GroupHooks {
  /** Awaited before group `group` starts. */
  admitGroup(group: number): Promise<void>;
  /** Group `group` finished with `episodes` (numbered as the rollout numbers them). */
  onGroup(group: number, episodes: EpisodeRecord[]): void;
}

/** The play of the rollout's groups, one window at a time (a finite rollout is window 0). */
export interface WindowPlay {
  play(window: number, hooks: GroupHooks): Promise<BatchResult>;
  /** Episodes finished so far, over every window. */
  readonly episodes: number;
  /** How many of those failed. */
  readonly failed: number;
  /** Sends a progress frame; `force`: even within half a second of the last one. */
  progress(force: boolean): void;
}

/** How a delivery ends: the rollout's `batch` frame and the groups it judged (watchers get both). */
export interface Delivered {
  verdict: BatchFrame;
  groups: readonly GroupResult[];
}

export interface Delivery {
  /** Plays every group and sends what the mode sends; resolves with the verdict, still to be queued. */
  run(): Promise<Delivered>;
}
