// Fakes for the delivery tests (test/server/delivery-*.test.ts): a rollout that records what its
// delivery queued and lets the test acknowledge, grant budget room and cancel; a play whose groups
// the test admits and finishes by hand; and episode records to finish them with.
import { createRegistry } from "../../envs/catalog.ts";
import type { GroupFrame, WindowFrame } from "../../protocol/messages.ts";
import { ASYNC, defaultsOf } from "../../protocol/settings.ts";
import { WaitQueue } from "../../src/concurrency/wait-queue.ts";
import type { BatchResult, EpisodeRecord, GroupResult } from "../../src/record/episode-record.ts";
import type { BatchRequest } from "../../src/rollout/batch.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";
import type { DeliveryHost, GroupHooks, WindowPlay } from "../../src/server/delivery/host.ts";
import { PlayMeter } from "../../src/server/memory-costs.ts";
import type { PaceSettings } from "../../src/server/pacing.ts";
import type { SessionMemory } from "../../src/server/session.ts";

export const registry = createRegistry();

/** A SimpleSokoban train request of `groups` groups of `groupSize`. */
export function request(groups: number, groupSize = 2, seed = 0): BatchRequest {
  return { ...defaultBatchRequest("train", { tags: [{ tag: "SimpleSokoban", groups }], groupSize }), seed };
}

export function noMemory(): SessionMemory {
  return {
    held: 0,
    kinds: { rollouts: 0, groups: 0, env: 0 },
    charge: () => {},
    close: () => {},
    shed: () => false,
  };
}

/** A rollout as a delivery sees it, with the budget and the client played by the test. */
export class FakeRollout implements DeliveryHost {
  readonly id = "r";
  readonly meter = new PlayMeter(noMemory());
  buffered = 0;
  /** Episodes held against the budget (never given back here: the rollout's end does that). */
  held = 0;
  /** Group frames queued, in order. */
  readonly queued: GroupFrame[] = [];
  /** Episodes of each group discarded. */
  readonly discarded: number[] = [];
  readonly windows: WindowFrame[] = [];
  /** False: a group asking for budget room waits for grantRoom(). */
  room = true;
  private readonly roomWaiting: ((granted: boolean) => void)[] = [];
  private readonly abort = new AbortController();
  private readonly waiting = new WaitQueue();

  get signal(): AbortSignal {
    return this.abort.signal;
  }

  get queuedGroups(): number[] {
    return this.queued.map((f) => f.group);
  }

  /** Groups waiting for budget room. */
  get waitingForRoom(): number {
    return this.roomWaiting.length;
  }

  until(ready: () => boolean): Promise<boolean> {
    return this.waiting.until(ready, this.abort.signal);
  }

  hold(episodes: number): void {
    this.held += episodes;
  }

  waitForRoom(episodes: number, _bytes: number, held: () => void): Promise<boolean> {
    const take = () => {
      this.held += episodes;
      held();
    };
    if (this.room) {
      take();
      return Promise.resolve(true);
    }
    return new Promise((resolve) =>
      this.roomWaiting.push((granted) => {
        if (granted) take();
        resolve(granted);
      }),
    );
  }

  takePlace(): void {
    this.buffered++;
  }

  returnPlace(): void {
    this.buffered--;
  }

  queue(_group: number, frame: GroupFrame, _episodes: number): void {
    this.queued.push(frame);
  }

  discard(episodes: number): void {
    this.buffered--;
    this.discarded.push(episodes);
    this.wake();
  }

  sendWindow(verdict: WindowFrame): void {
    this.windows.push(verdict);
  }

  /** The client acknowledged a group. */
  acknowledge(): void {
    this.buffered--;
    this.wake();
  }

  /** Room in the budget for the oldest group waiting for it. */
  grantRoom(): void {
    this.roomWaiting.shift()?.(true);
  }

  cancel(): void {
    this.abort.abort();
    this.wake();
    for (const refuse of this.roomWaiting.splice(0)) refuse(false);
  }

  /** What the rollout does on an acknowledgement or a change of the weight-update gate. */
  wake(): void {
    this.waiting.wakeAll();
  }
}

/** A play whose windows the test drives: it admits and finishes their groups, then ends them. */
export class ScriptedPlay implements WindowPlay {
  episodes = 0;
  failed = 0;
  /** progress(true) calls. */
  finalProgress = 0;
  private readonly windows = new Map<number, { hooks: GroupHooks; end: (result: BatchResult) => void }>();

  play(w: number, hooks: GroupHooks): Promise<BatchResult> {
    return new Promise((end) => this.windows.set(w, { hooks, end }));
  }

  progress(force: boolean): void {
    if (force) this.finalProgress++;
  }

  /** Whether window `w` is being played. */
  playing(w: number): boolean {
    return this.windows.has(w);
  }

  admit(group: number, w = 0): Promise<void> {
    return this.window(w).hooks.admitGroup(group);
  }

  /** Group `group` finished with `size` episodes whose oldest turn ran at ordinal `oldest`. */
  finish(group: number, size: number, oldest = 0, w = 0): void {
    const episodes = records(group, size, oldest);
    this.episodes += size;
    this.window(w).hooks.onGroup(group, episodes);
  }

  /** Window `w` ends with `groups` as the filter judged them. */
  end(w: number, groups: readonly GroupResult[]): void {
    this.window(w).end(result(groups));
    this.windows.delete(w);
  }

  private window(w: number): { hooks: GroupHooks; end: (result: BatchResult) => void } {
    const window = this.windows.get(w);
    if (!window) throw new Error(`window ${w} is not playing`);
    return window;
  }
}

/** The filter's verdict on a group: kept, dropped, or failed. */
export function judged(group_id: number, verdict: "kept" | "dropped" | "failed"): GroupResult {
  return {
    group_id,
    tag: "SimpleSokoban",
    seed: group_id,
    env_ids: [],
    score: verdict === "failed" ? null : 1,
    kept: verdict === "kept",
    failed: verdict === "failed",
  };
}

function result(groups: readonly GroupResult[]): BatchResult {
  return {
    mode: "train",
    seed: 0,
    episodes: [],
    groups: [...groups],
    metrics: {},
    failed: 0,
    notStarted: [],
  };
}

/** Solved one-turn episodes of group `group`, their turn run at ordinal `oldest`. */
export function records(group: number, size: number, oldest = 0): EpisodeRecord[] {
  return Array.from({ length: size }, (_, member) => ({
    env_id: group * size + member,
    group_id: group,
    tag: "SimpleSokoban",
    seed: group,
    turns: [
      {
        turn: 0,
        state: "",
        actions_left: 0,
        warned: false,
        raw_response: "",
        response: "",
        parsed: [],
        actions: [],
        reward: 1,
        reward_text: "1",
        format_penalty: false,
        info: {},
        finish_reason: "stop",
        version: { dispatch: oldest, completion: oldest },
      },
    ],
    final_state: "",
    num_actions: 1,
    terminated: true,
    truncated: false,
    success: true,
    reward: 1,
    penalty: 0,
    score: 1,
    metrics: {},
    failure: null,
    end_reason: "done",
  }));
}

/** Pace settings: ASYNC's defaults (every bound off), 8 groups in flight and 1 group per step, then `overrides`. */
export function paceOf(overrides: Partial<PaceSettings> = {}): PaceSettings {
  return { ...defaultsOf(ASYNC), in_flight: 8, groups_per_step: 1, ...overrides };
}
