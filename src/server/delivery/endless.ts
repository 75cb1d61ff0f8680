// Endless delivery: a stream that plays its tags' groups as one window after another until it is
// cancelled (or its seeds run out), each window with its own verdict in a `window` frame. Window
// w + 1 starts once every group of window w has been admitted, so groups stay in flight across
// windows; a window's verdict goes out when its last group is done. The rollout's batch frame
// then counts only windows and episodes.
import type { BatchFrame } from "../../../protocol/messages.ts";
import { MAX_INT32, MAX_SEED } from "../../../protocol/messages.ts";
import type { Delivered, Delivery, DeliveryHost, WindowPlay } from "./host.ts";
import type { StreamDelivery } from "./stream.ts";
import { windowVerdict } from "./verdicts.ts";

/**
 * - playing: windows start one after another;
 * - stopping: cancelled (or out of seeds), the windows still in flight finish;
 * - done: the batch frame is ready.
 */
export type EndlessState = "playing" | "stopping" | "done";

/**
 * One window's:
 * - admitting: some of its groups wait to start (the next window waits too);
 * - draining: all started or gave up, some still playing (the next window is under way);
 * - done: its verdict is queued.
 */
export type WindowState = "admitting" | "draining" | "done";

export class EndlessDelivery implements Delivery {
  state: EndlessState = "playing";
  private readonly host: DeliveryHost;
  private readonly player: WindowPlay;
  private readonly stream: StreamDelivery;
  /** Seed of window 0's first group. */
  private readonly seed: number;
  private readonly perWindow: number;
  /** Groups of each window this server plays: perWindow, or a shard's share (group_range). */
  private readonly playedPerWindow: number;
  /** Windows not yet done, by number. */
  private readonly unfinished = new Map<number, Exclude<WindowState, "done">>();
  private started = 0;
  private windowsDone = 0;

  constructor(
    host: DeliveryHost,
    player: WindowPlay,
    stream: StreamDelivery,
    seed: number,
    perWindow: number,
    playedPerWindow: number = perWindow,
  ) {
    this.host = host;
    this.player = player;
    this.stream = stream;
    this.seed = seed;
    this.perWindow = perWindow;
    this.playedPerWindow = playedPerWindow;
  }

  /** Window `w`'s state; undefined before it started. */
  windowState(w: number): WindowState | undefined {
    return this.unfinished.get(w) ?? (w < this.started ? "done" : undefined);
  }

  async run(): Promise<Delivered> {
    const { host } = this;
    const playing = new Set<Promise<void>>();
    const cancelled = new Promise<void>((resolve) =>
      host.signal.addEventListener("abort", () => resolve(), { once: true }),
    );
    for (let w = 0; !host.signal.aborted && fitsSeeds(this.seed, w, this.perWindow); w++) {
      const { allAdmitted, played } = this.startWindow(w);
      // Finished windows leave the set, so an endless stream holds only those still playing; a
      // failed one stays for Promise.all below to report.
      playing.add(played);
      played.then(
        () => playing.delete(played),
        () => {},
      );
      await Promise.race([allAdmitted, cancelled, played]);
    }
    this.state = "stopping";
    await Promise.all(playing);
    this.player.progress(true);
    this.state = "done";
    return { verdict: this.verdict(), groups: [] };
  }

  private startWindow(w: number): { allAdmitted: Promise<void>; played: Promise<void> } {
    this.unfinished.set(w, "admitting");
    this.started++;
    let admitted = 0;
    let allAdmitted!: () => void;
    const all = new Promise<void>((resolve) => {
      allAdmitted = resolve;
    });
    const afterAdmission = () => {
      if (++admitted < this.playedPerWindow) return;
      if (this.unfinished.has(w)) this.unfinished.set(w, "draining");
      allAdmitted();
    };
    const first = w * this.perWindow;
    const played = this.stream.window(w, afterAdmission).then(async (result) => {
      // strict_staleness may hold a finished group for a while: its verdict must not overtake it.
      await this.stream.sent(first, this.perWindow);
      const verdict = windowVerdict(
        this.host.id,
        w,
        this.perWindow,
        result,
        this.stream.settle(first, this.perWindow),
      );
      this.windowsDone++;
      this.unfinished.delete(w);
      this.host.sendWindow(verdict);
    });
    return { allAdmitted: all, played };
  }

  /** The stream's batch frame: no groups of its own (each window's verdict named them). */
  private verdict(): BatchFrame {
    const windows = this.windowsDone;
    // The fields in the order they have always had: clients see the same bytes.
    return {
      type: "batch",
      rollout: this.host.id,
      kept: [],
      dropped: [],
      failed_groups: [],
      metrics: { "rollgym/windows": windows },
      episodes: this.player.episodes,
      failed: this.player.failed,
      windows,
    };
  }
}

/** Whether window `w`'s seeds and group ids stay in range (an endless stream ends where they would not). */
function fitsSeeds(seed: number, w: number, perWindow: number): boolean {
  const last = (w + 1) * perWindow - 1;
  return seed + last <= MAX_SEED && last <= MAX_INT32;
}
