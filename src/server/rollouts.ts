// One admitted rollout, from its reservation to its verdict. The rollout owns its share of the
// episode budget, its buffer of unacknowledged groups and its cancellation; how its groups are
// played and sent is its delivery's: batch (delivery/batch.ts), stream (delivery/stream.ts) or an
// endless stream (delivery/endless.ts), the verdict and RAGEN metrics last in a `batch` frame.

import type { EnvRegistry } from "../../envs/registry.ts";
import type { BatchFrame, GroupFrame, RolloutRequest, WindowFrame } from "../../protocol/messages.ts";
import { WaitQueue } from "../concurrency/wait-queue.ts";
import { errorFrame, messageOf } from "../errors/boundary.ts";
import { RollgymError } from "../errors/catalogue.ts";
import type { Policy } from "../llm/policy.ts";
import type { TokenEngine } from "../llm/token-engine.ts";
import type { BatchRequest } from "../rollout/batch.ts";
import { BatchDelivery } from "./delivery/batch.ts";
import { EndlessDelivery } from "./delivery/endless.ts";
import type { Delivery, DeliveryHost } from "./delivery/host.ts";
import { RolloutPlay } from "./delivery/rollout-play.ts";
import { StreamDelivery } from "./delivery/stream.ts";
import { PlayMeter } from "./memory-costs.ts";
import type { ServerMetrics } from "./metrics.ts";
import type { Session, SessionRollout } from "./session.ts";
import type { UpdateCoordinator } from "./update-coordinator.ts";
import { rolloutStarted } from "./update-notices.ts";
import type { WatchedStream, WatchHub } from "./watch.ts";

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
export class Rollout implements SessionRollout, DeliveryHost {
  readonly id: string;
  /** The final `batch` frame once the rollout is complete. */
  batch: BatchFrame | null = null;
  /** Settles when the batch frame is queued (or the rollout failed). */
  done: Promise<void> = Promise.resolve();
  readonly meter: PlayMeter;
  private readonly session: Session;
  private readonly frame: RolloutRequest;
  private readonly request: BatchRequest;
  private readonly tokenEngine: TokenEngine | null;
  /** Groups started or finished and not yet acknowledged (stream), or kept and unacknowledged (batch). */
  private placesTaken = 0;
  /** Episodes held for groups not yet queued. */
  private reserved = 0;
  /** Producers waiting for room; each re-checks its condition when woken. */
  private readonly waiting = new WaitQueue();
  private readonly abort = new AbortController();
  private roomFor: WaitForRoom = async () => false;
  /** The last window frames of an endless stream, sent again on resume. */
  private readonly windows: WindowFrame[] = [];
  /** Copies a window verdict to the watchers, once the rollout runs. */
  private watchWindow: (verdict: WindowFrame) => void = () => {};

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
    // What its play holds against the memory budget.
    this.meter = new PlayMeter(session.memory);
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

  get signal(): AbortSignal {
    return this.abort.signal;
  }

  get buffered(): number {
    return this.placesTaken;
  }

  /** Plays through its delivery; `waitForRoom` is how a stream rollout's groups wait for the budget. */
  start(ctx: RolloutContext, waitForRoom: WaitForRoom): void {
    this.session.rollouts.set(this.id, this);
    this.roomFor = waitForRoom;
    this.done = this.run(ctx);
    rolloutStarted(ctx.updates, this.session, this.id);
  }

  /** Stops new turns and aborts in-flight inference; producers waiting for room wake up. */
  cancel(): void {
    this.abort.abort();
    this.wake();
  }

  /** One of its groups was acknowledged: its place in the buffer is free. */
  acknowledged(): void {
    this.placesTaken--;
    this.wake();
  }

  until(ready: () => boolean): Promise<boolean> {
    return this.waiting.until(ready, this.abort.signal);
  }

  hold(episodes: number): void {
    this.session.hold(episodes);
    this.reserved += episodes;
  }

  waitForRoom(episodes: number, bytes: number, held: () => void): Promise<boolean> {
    return this.roomFor(episodes, bytes, this.abort.signal, () => {
      this.reserved += episodes;
      held();
    });
  }

  takePlace(): void {
    this.placesTaken++;
  }

  returnPlace(): void {
    this.placesTaken--;
  }

  queue(group: number, frame: GroupFrame, episodes: number): void {
    this.reserved -= episodes;
    this.session.enqueueGroup(this.id, group, frame, episodes);
  }

  discard(episodes: number): void {
    this.placesTaken--;
    this.reserved -= episodes;
    this.session.release(episodes);
    this.wake();
  }

  sendWindow(verdict: WindowFrame): void {
    this.windows.push(verdict);
    if (this.windows.length > KEPT_WINDOWS) this.windows.shift();
    this.session.enqueue(verdict);
    this.watchWindow(verdict);
  }

  private wake(): void {
    this.waiting.wakeAll();
  }

  private async run(ctx: RolloutContext): Promise<void> {
    const { id, frame, request, session } = this;
    const watched = ctx.watch?.start({
      rollout: id,
      mode: request.mode,
      delivery: frame.delivery,
      tags: request.tags.map(({ tag, groups }) => ({ tag, groups })),
      group_size: request.groupSize,
      seed: request.seed,
      ...(frame.endless ? { endless: true } : {}),
    });
    if (watched) this.watchWindow = (verdict) => watched.window(verdict, ctx.updates.current);
    ctx.metrics.rollouts.inc({ mode: request.mode, delivery: frame.delivery });
    ctx.metrics.activeRollouts.inc();
    // A version change or the gate reopening may let a waiting group start.
    const stopListening = ctx.updates.onChange(() => this.wake());
    const delivery = this.delivery(ctx, watched);
    try {
      const { verdict, groups } = await delivery.run();
      this.batch = verdict;
      session.enqueue(verdict);
      watched?.verdict(verdict, groups);
    } catch (error) {
      this.abort.abort(); // an endless stream's other windows stop too
      const message = messageOf(error);
      watched?.failed(message);
      session.sendNow(errorFrame(new RollgymError("internal", { message }), { rollout: id }));
      session.rollouts.delete(id);
    } finally {
      stopListening();
      this.meter.end();
      session.release(this.reserved);
      this.reserved = 0;
      ctx.metrics.activeRollouts.dec();
    }
  }

  /** The delivery the request asked for; the staleness pacing comes with a stream's. */
  private delivery(ctx: RolloutContext, watched: WatchedStream | undefined): Delivery {
    const { request } = this;
    const endless = this.frame.endless === true;
    const player = new RolloutPlay(ctx, {
      rollout: this.id,
      request,
      tokenEngine: this.tokenEngine,
      signal: this.abort.signal,
      meter: this.meter,
      session: this.session,
      watched,
      endless,
    });
    const { registry, updates } = ctx;
    if (this.frame.delivery !== "stream")
      return new BatchDelivery(this, player, { request, registry, updates });
    const stream = new StreamDelivery(this, player, {
      request,
      registry,
      updates,
      pace: this.request.pace,
      maxBufferedGroups: ctx.maxBufferedGroups,
      metrics: ctx.metrics,
      windowed: endless,
    });
    if (!endless) return stream;
    // A shard's share (group_range) plays its range of every window.
    const played = request.groupRange?.count ?? this.windowGroups;
    return new EndlessDelivery(this, player, stream, request.seed, this.windowGroups, played);
  }
}
