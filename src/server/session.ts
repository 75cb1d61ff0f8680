// A trainer's session: outlives its WebSocket for the resume grace period. Holds the ordered
// outbox (group frames spend credit, other frames follow in order), the sent-but-unacknowledged
// groups for resume, and the per-rollout buffers that hold a rollout back behind a slow client.
import { randomUUID } from "node:crypto";
import type { WebSocket } from "ws";
import { encodeMessage } from "../../protocol/codec.ts";
import type { ServerMessage } from "../../protocol/messages.ts";

type Frame = ServerMessage & { type: string };

interface GroupEntry {
  rollout: string;
  group: number;
  seq: number;
  frame: Frame;
}

/** What a session knows about one rollout's delivery. */
export interface RolloutDelivery {
  id: string;
  /** Groups started or finished and not yet acknowledged (stream), or kept and unacknowledged (batch). */
  buffered: number;
  /** The rollout's final `batch` frame once it is complete. */
  batch: Frame | null;
  /** Wakes producers waiting for buffer room. */
  waiters: (() => void)[];
  abort: AbortController;
  done: Promise<void> | null;
}

export class Session {
  readonly id = randomUUID();
  private socket: WebSocket | null = null;
  private credit = 0;
  private seq = 0;
  /** Frames waiting to go out, in order; a group frame needs credit. */
  private readonly outbox: (GroupEntry | Frame)[] = [];
  /** Sent, not yet acknowledged, by "rollout/group". */
  private readonly inflight = new Map<string, GroupEntry>();
  readonly rollouts = new Map<string, RolloutDelivery>();
  private graceTimer: NodeJS.Timeout | null = null;
  /** Called when the session ends for good (grace expired or server shutdown). */
  onEnd: () => void = () => {};

  /** Finished groups the client has not acknowledged: queued or in flight. */
  get unacknowledgedGroups(): number {
    return this.inflight.size + this.outbox.filter((f) => "frame" in f).length;
  }

  attach(socket: WebSocket, resumed: boolean): void {
    if (this.graceTimer) clearTimeout(this.graceTimer);
    this.graceTimer = null;
    // A client may resume before the server has noticed its old connection drop.
    if (this.socket && this.socket !== socket) this.socket.close(1000, "superseded by a resumed connection");
    this.socket = socket;
    this.credit = 0;
    if (resumed) {
      // Everything unacknowledged goes out again, before newer frames, in seq order; then the
      // batch frames of complete rollouts the client has not confirmed.
      const again = [...this.inflight.values()].sort((a, b) => a.seq - b.seq);
      this.inflight.clear();
      const queuedBatches = new Set(this.outbox.filter((f) => !("frame" in f) && f.type === "batch"));
      const batches = [...this.rollouts.values()]
        .map((r) => r.batch)
        .filter((b): b is Frame => b !== null && !queuedBatches.has(b));
      this.outbox.unshift(...again, ...batches);
    }
  }

  /**
   * `socket` closed; keep everything for `graceMs`, then end. A resumed session may already be
   * on a newer socket when the old one's close arrives; that close changes nothing.
   */
  detach(socket: WebSocket, graceMs: number): void {
    if (this.socket !== socket) return;
    this.socket = null;
    this.graceTimer = setTimeout(() => this.end(), graceMs);
    this.graceTimer.unref();
  }

  end(): void {
    if (this.graceTimer) clearTimeout(this.graceTimer);
    this.graceTimer = null;
    for (const rollout of this.rollouts.values()) {
      rollout.abort.abort();
      for (const wake of rollout.waiters.splice(0)) wake();
    }
    this.onEnd();
  }

  /** Send now, outside the outbox (errors, progress, env replies, welcome). */
  sendNow(frame: Frame): void {
    this.socket?.send(encodeMessage(frame));
  }

  enqueueGroup(rollout: string, group: number, frame: Frame): void {
    const entry = { rollout, group, seq: ++this.seq, frame: { ...frame, seq: this.seq } as Frame };
    this.outbox.push(entry);
    this.pump();
  }

  enqueue(frame: Frame): void {
    this.outbox.push(frame);
    this.pump();
  }

  grant(groups: number): void {
    // Credit beyond any batch a server would hold means "unlimited"; keep the counter finite.
    this.credit = Math.min(this.credit + groups, 1_000_000_000);
    this.pump();
  }

  /** Confirm groups; returns the ids that were not in flight. */
  ack(rolloutId: string, groups: readonly number[], batch: boolean): number[] {
    const unknown: number[] = [];
    const rollout = this.rollouts.get(rolloutId);
    for (const group of groups) {
      if (!this.inflight.delete(`${rolloutId}/${group}`)) {
        unknown.push(group);
        continue;
      }
      if (rollout) {
        rollout.buffered--;
        rollout.waiters.shift()?.();
      }
    }
    if (batch && rollout?.batch) this.rollouts.delete(rolloutId);
    return unknown;
  }

  /**
   * Resolves once the rollout has fewer than `limit` groups running or waiting on the client,
   * and reserves a place for the group about to start (released by its acknowledgement).
   */
  async room(rollout: RolloutDelivery, limit: number): Promise<void> {
    while (rollout.buffered >= limit && !rollout.abort.signal.aborted) {
      await new Promise<void>((resolve) => rollout.waiters.push(resolve));
    }
    rollout.buffered++;
  }

  /** Shutdown: send the queued non-group frames (the verdicts) even where groups wait for credit. */
  flushVerdicts(): void {
    const socket = this.socket;
    for (const frame of this.outbox.splice(0)) if (!("frame" in frame)) socket?.send(encodeMessage(frame));
  }

  private pump(): void {
    const socket = this.socket;
    if (!socket) return;
    while (this.outbox.length > 0) {
      const next = this.outbox[0];
      if ("frame" in next) {
        if (this.credit <= 0) return;
        this.credit--;
        this.inflight.set(`${next.rollout}/${next.group}`, next);
        this.outbox.shift();
        socket.send(encodeMessage(next.frame));
      } else {
        this.outbox.shift();
        socket.send(encodeMessage(next));
      }
    }
  }
}
