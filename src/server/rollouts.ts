// One admitted rollout, from its reservation to its verdict: the engine plays the batch, finished
// groups go to the session's outbox (stream: as they finish, behind the buffer bound; batch: the
// kept groups once the filter has decided), then the verdict and RAGEN metrics in a `batch` frame.
// An endless stream plays its tags' groups as one window after another, each with its own
// verdict in a `window` frame, until cancelled. The object owns the rollout's share of the
// episode budget, its buffer, its pacing against weight versions and its cancellation.

import { setImmediate as nextTurn } from "node:timers/promises";
import type { EnvRegistry } from "../../envs/registry.ts";
import type {
  Admitted,
  BatchFrame,
  GroupFrame,
  ProgressFrame,
  RolloutRequest,
  WindowFrame,
} from "../../protocol/messages.ts";
import { MAX_INT32, MAX_SEED } from "../../protocol/messages.ts";
import { errorFrame, messageOf } from "../errors/boundary.ts";
import { RollgymError } from "../errors/catalogue.ts";
import type { Policy } from "../llm/policy.ts";
import type { TokenEngine } from "../llm/token-engine.ts";
import type { BatchResult, EpisodeRecord } from "../record/episode-record.ts";
import { type BatchRequest, groupTags, playBatch } from "../rollout/batch.ts";
import { groupFrame, versionRange } from "./group-frame.ts";
import { episodesBytes, PlayMeter } from "./memory-costs.ts";
import type { ServerMetrics } from "./metrics.ts";
import { type PaceSettings, StreamPacing } from "./pacing.ts";
import type { Session, SessionRollout } from "./session.ts";
import type { UpdateCoordinator } from "./updates.ts";
import type { WatchHub } from "./watch.ts";

/** Group frames built between two turns of the event loop when a batch is delivered. */
const FRAMES_PER_SLICE = 16;

export interface RolloutContext {
  registry: EnvRegistry;
  policy: Policy;
  metrics: ServerMetrics;
  maxBufferedGroups: number;
  groupConcurrency: number;
  /** Watchers get copies of every group and verdict (read-only, lossy). */
  watch?: WatchHub;
  /** The trainer's weight updates: new groups wait while one is open. */
  updates: UpdateCoordinator;
}

/** Window frames an endless stream keeps to send again after a resume (the client drops repeats). */
const KEPT_WINDOWS = 16;

/**
 * Waits for room for `episodes` in the budget and holds them; false when `signal` aborted first.
 * `held` runs in the same step as the hold, so the bytes it charges count before the budget
 * admits anyone else.
 */
export type WaitForRoom = (
  episodes: number,
  bytes: number,
  signal: AbortSignal,
  held: () => void,
) => Promise<boolean>;

/**
 * A rollout of one session. Budget: batch delivery holds the whole rollout when it starts (its
 * admission checked that it fits); stream delivery holds each group just before it starts,
 * waiting for room. Held episodes move to each group as it is queued (released by its
 * acknowledgement); what is never queued goes back when the rollout ends.
 */
export class Rollout implements SessionRollout {
  readonly id: string;
  /** The final `batch` frame once the rollout is complete. */
  batch: BatchFrame | null = null;
  /** Settles when the batch frame is queued (or the rollout failed). */
  done: Promise<void> = Promise.resolve();
  private readonly session: Session;
  private readonly frame: RolloutRequest;
  private readonly request: BatchRequest;
  private readonly tokenEngine: TokenEngine | null;
  private readonly stream: boolean;
  private readonly endless: boolean;
  private readonly pace: PaceSettings;
  /** Groups started or finished and not yet acknowledged (stream), or kept and unacknowledged (batch). */
  private buffered = 0;
  /** Episodes held for groups not yet queued. */
  private reserved = 0;
  /** Producers waiting for room; each re-checks its condition when woken. */
  private waiters: (() => void)[] = [];
  private readonly abort = new AbortController();
  /** The last window frames of an endless stream, sent again on resume. */
  private readonly windows: WindowFrame[] = [];

  constructor(
    session: Session,
    frame: RolloutRequest,
    request: BatchRequest,
    tokenEngine: TokenEngine | null,
    pace: PaceSettings,
  ) {
    this.id = frame.id;
    this.session = session;
    this.frame = frame;
    this.request = request;
    this.tokenEngine = tokenEngine;
    this.stream = frame.delivery === "stream";
    this.endless = frame.endless === true;
    this.pace = pace;
  }

  /** Groups in one window: all of a finite rollout's. */
  private get windowGroups(): number {
    return this.request.tags.reduce((n, t) => n + t.groups, 0);
  }

  /** Episodes in the whole rollout (one window of an endless stream). */
  get episodes(): number {
    return this.windowGroups * this.request.groupSize;
  }

  /** Frames to send again when the session resumes: the kept window verdicts, then the batch frame. */
  get verdicts(): readonly (WindowFrame | BatchFrame)[] {
    return this.batch ? [...this.windows, this.batch] : this.windows;
  }

  /** Reserves its budget, then plays; `waitForRoom` is how a stream rollout's groups wait for it. */
  start(ctx: RolloutContext, waitForRoom: WaitForRoom): void {
    this.session.rollouts.set(this.id, this);
    if (!this.stream) this.hold(this.episodes);
    this.done = this.run(ctx, waitForRoom);
  }

  /** Stops new turns and aborts in-flight inference; producers waiting for room wake up. */
  cancel(): void {
    this.abort.abort();
    this.wake();
  }

  /** One of its groups was acknowledged: its place in the buffer is free. */
  acknowledged(): void {
    this.buffered--;
    this.wake();
  }

  private wake(): void {
    for (const wake of this.waiters.splice(0)) wake();
  }

  private hold(episodes: number): void {
    this.session.hold(episodes);
    this.reserved += episodes;
  }

  /** Resolves once `ready()` returns true (true) or the rollout is cancelled first (false). */
  private async until(ready: () => boolean): Promise<boolean> {
    for (;;) {
      if (this.abort.signal.aborted) return false;
      if (ready()) return true;
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
  }

  private queue(group: number, frame: GroupFrame, episodes: number): void {
    this.reserved -= episodes;
    this.session.enqueueGroup(this.id, group, frame, episodes);
  }

  /** A finished stream group that goes no further: its buffer place and episodes are freed. */
  private discard(episodes: number): void {
    this.buffered--;
    this.reserved -= episodes;
    this.session.release(episodes);
    this.wake();
  }

  private async run(ctx: RolloutContext, waitForRoom: WaitForRoom): Promise<void> {
    const { id, frame, request, session, stream, endless } = this;
    const updates = ctx.updates;
    const perWindow = this.windowGroups;
    const total = this.episodes;
    const held = new Map<number, EpisodeRecord[]>();
    // What its play holds, against the memory budget: a batch's every episode from now.
    const meter = new PlayMeter(session.memory);
    if (!stream) meter.admit(-1, episodesBytes(ctx.registry, request.tags, request.groupSize));
    const tags = groupTags(request);
    const pacing = stream ? new StreamPacing(this.pace, updates) : null;
    const admissions = new Map<number, Admitted>();
    // Dropped for their age and not yet in a verdict (an endless stream's window forgets its own).
    const staleDropped = new Set<number>();
    let finished = 0;
    let failed = 0;
    let groupsDone = 0;
    let lastProgress = 0;
    const watched = ctx.watch?.start({
      rollout: id,
      mode: request.mode,
      delivery: frame.delivery,
      tags: request.tags.map(({ tag, groups }) => ({ tag, groups })),
      group_size: request.groupSize,
      seed: request.seed,
    });
    ctx.metrics.rollouts.inc({ mode: request.mode, delivery: frame.delivery });
    ctx.metrics.activeRollouts.inc();
    // A version change or the gate reopening may let a waiting group start.
    const stopListening = updates.onChange(() => this.wake());

    const progress = (force: boolean) => {
      const now = Date.now();
      if (!force && now - lastProgress < 500) return;
      lastProgress = now;
      const update: ProgressFrame = {
        type: "progress",
        rollout: id,
        episodes_done: finished,
        episodes_total: endless ? groupsDone * request.groupSize : total,
        groups_done: groupsDone,
        failed,
      };
      // Progress is superseded by the next one: skipped while the client is not reading.
      session.sendDroppable(update);
    };

    /** Plays window `w` (an endless stream's; a finite rollout is window 0): its groups are w × perWindow + g. */
    const playWindow = (w: number, allAdmitted: () => void): Promise<BatchResult> => {
      const first = w * perWindow;
      let admitted = 0;
      const counted = () => {
        if (++admitted === perWindow) allAdmitted();
      };
      return playBatch(
        ctx.registry,
        { ...request, seed: request.seed + first },
        ctx.policy,
        this.tokenEngine,
        {
          signal: this.abort.signal,
          maxConcurrentGroups: ctx.groupConcurrency,
          retainEpisodes: false,
          admitGroup: stream
            ? async (local) => {
                const group = first + local;
                // The place is taken in the same turn as the check, so concurrent workers never
                // pass the buffer bound or the staleness rule together.
                let admission: Admitted | null = null;
                const ready = await this.until(() => {
                  if (this.buffered >= ctx.maxBufferedGroups || !pacing!.fits()) return false;
                  this.buffered++;
                  admission = pacing!.admit();
                  return true;
                });
                const bytes = episodesBytes(
                  ctx.registry,
                  [{ tag: tags[local], groups: 1 }],
                  request.groupSize,
                );
                const started =
                  ready &&
                  (await waitForRoom(request.groupSize, bytes, this.abort.signal, () => {
                    this.reserved += request.groupSize;
                    meter.admit(group, bytes);
                  }));
                if (started) admissions.set(group, admission!);
                else if (admission) {
                  // Cancelled while waiting for the episode budget: the group never starts.
                  this.buffered--;
                  pacing!.finished(false);
                }
                counted();
              }
            : async () => {
                // Batch delivery: its groups wait only while a weight update is open.
                if (updates.closed) await this.until(() => !updates.closed);
                counted();
              },
          onEnvBytes: (local, bytes) => meter.envBytes(first + local, bytes),
          onTurn: (episode) => {
            ctx.metrics.turns.inc();
            meter.turn(first + episode.groupId, episode.lastTurn);
          },
          onEpisode: (record) => {
            meter.episode({ ...record, group_id: first + record.group_id });
            finished++;
            if (record.failure !== null) failed++;
            ctx.metrics.episodes.inc({
              outcome: record.failure !== null ? "failed" : record.success ? "success" : "fail",
            });
            progress(false);
          },
          onGroup: (local, records) => {
            const group = first + local;
            const episodes = endless ? renumbered(records, group, request.groupSize) : records;
            groupsDone++;
            watched?.group(group, episodes);
            if (!stream) {
              held.set(group, episodes);
              return;
            }
            meter.release(group);
            const admitted = admissions.get(group);
            admissions.delete(group);
            // Too old for drop_older_than: not sent, and not accepted (another group takes its place).
            if (pacing!.tooOld(versionRange(episodes)?.min ?? null)) {
              pacing!.finished(false);
              staleDropped.add(group);
              ctx.metrics.staleGroupsDropped.inc();
              this.discard(episodes.length);
              return;
            }
            pacing!.finished(true);
            // A stream group's place in the buffer was taken when it was admitted.
            this.queue(
              group,
              groupFrame(id, group, episodes, null, null, {
                versions: updates.used,
                window: endless ? w : undefined,
                admitted: this.pace.max_staleness !== null ? admitted : undefined,
              }),
              episodes.length,
            );
          },
        },
      );
    };

    try {
      let result: BatchResult;
      if (!endless) {
        result = await playWindow(0, () => {});
      } else {
        // Window w + 1 starts once every group of window w has been admitted, so groups stay in
        // flight across windows; a window's verdict goes out when its last group is done.
        const playing = new Set<Promise<void>>();
        const cancelled = new Promise<void>((resolve) =>
          this.abort.signal.addEventListener("abort", () => resolve(), { once: true }),
        );
        let windows = 0;
        for (let w = 0; !this.abort.signal.aborted && fitsSeeds(request.seed, w, perWindow); w++) {
          let admitted!: () => void;
          const allAdmitted = new Promise<void>((resolve) => {
            admitted = resolve;
          });
          const played = playWindow(w, admitted).then((window) => {
            const verdict = windowFrame(id, w, perWindow, window, staleDropped);
            for (let g = w * perWindow; g < (w + 1) * perWindow; g++) staleDropped.delete(g);
            windows++;
            this.windows.push(verdict);
            if (this.windows.length > KEPT_WINDOWS) this.windows.shift();
            session.enqueue(verdict);
          });
          // Finished windows leave the set, so an endless stream holds only those still playing; a
          // failed one stays for Promise.all below to report.
          playing.add(played);
          played.then(
            () => playing.delete(played),
            () => {},
          );
          await Promise.race([allAdmitted, cancelled, played]);
        }
        await Promise.all(playing);
        result = {
          mode: request.mode,
          seed: request.seed,
          episodes: [],
          groups: [],
          metrics: {},
          failed,
          notStarted: [],
        };
        result.metrics["rollgym/windows"] = windows;
      }
      progress(true);
      if (!stream) {
        let built = 0;
        for (const g of result.groups) {
          if (!g.kept) continue;
          // Frames of a large batch are built a few at a time, so other clients are served meanwhile.
          if (++built % FRAMES_PER_SLICE === 0) await nextTurn();
          this.buffered++;
          const episodes = held.get(g.group_id) ?? [];
          this.queue(
            g.group_id,
            groupFrame(id, g.group_id, episodes, true, g.score, { versions: updates.used }),
            episodes.length,
          );
        }
        held.clear();
      }
      const { kept, dropped, failed_groups, ...after } = verdictLists(
        result,
        endless ? new Set() : staleDropped,
      );
      // The fields in the order they have always had: clients see the same bytes.
      const verdict: BatchFrame = {
        type: "batch",
        rollout: id,
        kept,
        dropped,
        failed_groups,
        metrics: result.metrics,
        episodes: endless ? finished : result.episodes.length,
        failed: result.failed,
        ...after,
        ...(endless ? { windows: result.metrics["rollgym/windows"] } : {}),
      };
      this.batch = verdict;
      session.enqueue(verdict);
      watched?.verdict(verdict, result.groups);
    } catch (error) {
      this.abort.abort(); // an endless stream's other windows stop too
      const message = messageOf(error);
      watched?.failed(message);
      session.sendNow(errorFrame(new RollgymError("internal", { message }), { rollout: id }));
      session.rollouts.delete(id);
    } finally {
      stopListening();
      meter.end();
      session.release(this.reserved);
      this.reserved = 0;
      ctx.metrics.activeRollouts.dec();
    }
  }
}

/** Whether window `w`'s seeds and group ids stay in range (an endless stream ends where they would not). */
function fitsSeeds(seed: number, w: number, perWindow: number): boolean {
  const last = (w + 1) * perWindow - 1;
  return seed + last <= MAX_SEED && last <= MAX_INT32;
}

/** An endless stream's episodes as the stream numbers them: group `group`, env ids group × size + member. */
function renumbered(records: readonly EpisodeRecord[], group: number, groupSize: number): EpisodeRecord[] {
  return records.map((r, member) => ({ ...r, group_id: group, env_id: group * groupSize + member }));
}

/** A verdict's group lists; `staleDropped` groups (never sent) leave kept and dropped for their own list. */
function verdictLists(
  result: BatchResult,
  stale: ReadonlySet<number>,
  offset = 0,
): Pick<BatchFrame, "kept" | "dropped" | "failed_groups" | "not_started" | "stale_dropped"> {
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

function windowFrame(
  rollout: string,
  w: number,
  perWindow: number,
  result: BatchResult,
  staleDropped: ReadonlySet<number>,
): WindowFrame {
  const first = w * perWindow;
  const { kept, dropped, failed_groups, ...after } = verdictLists(result, staleDropped, first);
  return {
    type: "window",
    rollout,
    window: w,
    first,
    groups: perWindow,
    kept,
    dropped,
    failed_groups,
    metrics: result.metrics,
    episodes: result.episodes.length,
    failed: result.failed,
    ...after,
  };
}
