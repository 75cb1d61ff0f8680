// One admitted rollout, from its reservation to its verdict: the engine plays the batch, finished
// groups go to the session's outbox (stream: as they finish, behind the buffer bound; batch: the
// kept groups once the filter has decided), then the verdict and RAGEN metrics in a `batch` frame.
// The object owns the rollout's share of the episode budget, its buffer and its cancellation.

import { setImmediate as nextTurn } from "node:timers/promises";
import type { EnvRegistry } from "../../envs/registry.ts";
import type { BatchFrame, GroupFrame, ProgressFrame, RolloutRequest } from "../../protocol/messages.ts";
import { errorFrame, messageOf } from "../errors/boundary.ts";
import { RollgymError } from "../errors/catalogue.ts";
import type { Policy } from "../llm/policy.ts";
import type { TokenEngine } from "../llm/token-engine.ts";
import type { EpisodeRecord } from "../record/episode-record.ts";
import { type BatchRequest, groupTags, playBatch } from "../rollout/batch.ts";
import { groupFrame } from "./group-frame.ts";
import { episodesBytes, PlayMeter } from "./memory-costs.ts";
import type { ServerMetrics } from "./metrics.ts";
import type { Session, SessionRollout } from "./session.ts";
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
}

/**
 * Waits for room for `episodes` in the budget and holds them; false when `signal` aborted first.
 * `held` runs in the same step as the hold, so the bytes it charges count before the budget
 * admits anyone else.
 */
export type WaitForRoom = (episodes: number, signal: AbortSignal, held: () => void) => Promise<boolean>;

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
  /** Groups started or finished and not yet acknowledged (stream), or kept and unacknowledged (batch). */
  private buffered = 0;
  /** Episodes held for groups not yet queued. */
  private reserved = 0;
  /** Producers waiting for buffer room. */
  private readonly waiters: (() => void)[] = [];
  private readonly abort = new AbortController();

  constructor(
    session: Session,
    frame: RolloutRequest,
    request: BatchRequest,
    tokenEngine: TokenEngine | null,
  ) {
    this.id = frame.id;
    this.session = session;
    this.frame = frame;
    this.request = request;
    this.tokenEngine = tokenEngine;
    this.stream = frame.delivery === "stream";
  }

  /** Still playing: its batch frame is not built yet. */
  /** Episodes in the whole rollout. */
  get episodes(): number {
    return this.request.tags.reduce((n, t) => n + t.groups, 0) * this.request.groupSize;
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
    for (const wake of this.waiters.splice(0)) wake();
  }

  /** One of its groups was acknowledged: its place in the buffer is free. */
  acknowledged(): void {
    this.buffered--;
    this.waiters.shift()?.();
  }

  private hold(episodes: number): void {
    this.session.hold(episodes);
    this.reserved += episodes;
  }

  /**
   * Resolves once fewer than `limit` groups are running or waiting on the client, and takes a
   * place for the group about to start (freed by its acknowledgement).
   */
  private async room(limit: number): Promise<void> {
    while (this.buffered >= limit && !this.abort.signal.aborted) {
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
    this.buffered++;
  }

  private queue(group: number, frame: GroupFrame, episodes: number): void {
    this.reserved -= episodes;
    this.session.enqueueGroup(this.id, group, frame, episodes);
  }

  private async run(ctx: RolloutContext, waitForRoom: WaitForRoom): Promise<void> {
    const { id, frame, request, session, stream } = this;
    const total = this.episodes;
    const held = new Map<number, EpisodeRecord[]>();
    // What its play holds, against the memory budget: a batch's every episode from now.
    const meter = new PlayMeter(session.memory);
    if (!stream) meter.admit(-1, episodesBytes(ctx.registry, request.tags, request.groupSize));
    const tags = groupTags(request);
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

    const progress = (force: boolean) => {
      const now = Date.now();
      if (!force && now - lastProgress < 500) return;
      lastProgress = now;
      const update: ProgressFrame = {
        type: "progress",
        rollout: id,
        episodes_done: finished,
        episodes_total: total,
        groups_done: groupsDone,
        failed,
      };
      // Progress is superseded by the next one: skipped while the client is not reading.
      session.sendDroppable(update);
    };

    try {
      const batch = await playBatch(ctx.registry, request, ctx.policy, this.tokenEngine, {
        signal: this.abort.signal,
        maxConcurrentGroups: ctx.groupConcurrency,
        retainEpisodes: false,
        admitGroup: stream
          ? async (group) => {
              await this.room(ctx.maxBufferedGroups);
              await waitForRoom(request.groupSize, this.abort.signal, () => {
                this.reserved += request.groupSize;
                meter.admit(
                  group,
                  episodesBytes(ctx.registry, [{ tag: tags[group], groups: 1 }], request.groupSize),
                );
              });
            }
          : undefined,
        onTurn: (episode) => {
          ctx.metrics.turns.inc();
          meter.turn(episode.groupId, episode.lastTurn);
        },
        onEpisode: (record) => {
          meter.episode(record);
          finished++;
          if (record.failure !== null) failed++;
          ctx.metrics.episodes.inc({
            outcome: record.failure !== null ? "failed" : record.success ? "success" : "fail",
          });
          progress(false);
        },
        onGroup: (group, episodes) => {
          groupsDone++;
          watched?.group(group, episodes);
          // A stream group's place in the buffer was taken when it was admitted.
          if (stream) {
            this.queue(group, groupFrame(id, group, episodes, null, null), episodes.length);
            meter.release(group);
          } else held.set(group, episodes);
        },
      });
      progress(true);
      if (!stream) {
        let built = 0;
        for (const g of batch.groups) {
          if (!g.kept) continue;
          // Frames of a large batch are built a few at a time, so other clients are served meanwhile.
          if (++built % FRAMES_PER_SLICE === 0) await nextTurn();
          this.buffered++;
          const episodes = held.get(g.group_id) ?? [];
          this.queue(g.group_id, groupFrame(id, g.group_id, episodes, true, g.score), episodes.length);
        }
        held.clear();
      }
      const verdict: BatchFrame = {
        type: "batch",
        rollout: id,
        kept: batch.groups.filter((g) => g.kept).map((g) => g.group_id),
        dropped: batch.groups.filter((g) => !g.kept && !g.failed).map((g) => g.group_id),
        failed_groups: batch.groups.filter((g) => g.failed).map((g) => g.group_id),
        metrics: batch.metrics,
        episodes: batch.episodes.length,
        failed: batch.failed,
        // Cancelled before they started: no group frame comes for these (they are in failed_groups).
        ...(batch.notStarted.length > 0 ? { not_started: batch.notStarted } : {}),
      };
      this.batch = verdict;
      session.enqueue(verdict);
      watched?.verdict(verdict, batch.groups);
    } catch (error) {
      const message = messageOf(error);
      watched?.failed(message);
      session.sendNow(errorFrame(new RollgymError("internal", { message }), { rollout: id }));
      session.rollouts.delete(id);
    } finally {
      meter.end();
      session.release(this.reserved);
      this.reserved = 0;
      ctx.metrics.activeRollouts.dec();
    }
  }
}
