// A trainer's session: outlives its WebSocket for the resume grace period. Holds the ordered
// outbox (group frames spend credit, other frames follow in order), the sent-but-unacknowledged
// groups for resume, the per-rollout buffers that hold a rollout back behind a slow client, and
// the session's share of the episode budget (docs/server.md "Episode budget").
import { randomUUID } from "node:crypto";
import { encodeMessage } from "../../protocol/codec.ts";
import type { ServerMessage } from "../../protocol/messages.ts";
import type { Outbound } from "./outbound.ts";

type Frame = ServerMessage & { type: string };

const isGroup = (item: GroupEntry | Frame): item is GroupEntry => "bytes" in item;

interface GroupEntry {
  rollout: string;
  group: number;
  seq: number;
  /** Episodes the group holds against the budget until it is acknowledged. */
  episodes: number;
  /**
   * The group frame, encoded once when it is queued: a held group costs its msgpack bytes (a
   * fraction of the objects it was built from), and a resume sends the same bytes again.
   */
  bytes: Uint8Array;
}

/** What a session needs of one of its rollouts (rollouts.ts owns the rest). */
export interface SessionRollout {
  readonly id: string;
  /** The rollout's final `batch` frame once it is complete. */
  readonly batch: Frame | null;
  /** What a resumed session gets again: window verdicts kept by an endless stream, then the batch frame. */
  readonly verdicts: readonly Frame[];
  /** Settles when the batch frame is queued (or the rollout failed). */
  readonly done: Promise<void>;
  cancel(): void;
  /** One of its groups was acknowledged. */
  acknowledged(): void;
}

/** What the memory budget counts, by the kind of session that holds it. */
export type HeldKind = "rollouts" | "groups" | "env";

/** The bytes a session holds, charged into the server's memory budget (budget.ts's MemoryAccount). */
export interface SessionMemory {
  readonly held: number;
  readonly kinds: Readonly<Record<HeldKind, number>>;
  /** `bytes` more (or fewer, when negative) held. */
  charge(kind: HeldKind, bytes: number): void;
  /** The session ended: everything it held goes. */
  close(): void;
  /** Cancels one of the session's running rollouts to give memory back (`why` goes to its client); false when none. */
  shed: (why: string) => boolean;
}

export class Session {
  readonly id = randomUUID();
  private out: Outbound | null = null;
  private stopPumpOnDrain: (() => void) | null = null;
  private credit = 0;
  private seq = 0;
  /** Frames waiting to go out, in order; a group frame needs credit. */
  private readonly outbox: (GroupEntry | Frame)[] = [];
  /** Sent, not yet acknowledged, by "rollout/group". */
  private readonly inflight = new Map<string, GroupEntry>();
  /** Unacknowledged groups (queued or sent) per rollout id: the id stays taken while any is left. */
  private readonly unacked = new Map<string, number>();
  private unackedTotal = 0;
  /** Episodes this session holds against the budget (rollouts, unacknowledged groups, env sessions). */
  private held = 0;
  private ended = false;
  readonly rollouts = new Map<string, SessionRollout>();
  private graceTimer: NodeJS.Timeout | null = null;
  /** Called when the session ends for good (grace expired or server shutdown). */
  onEnd: () => void = () => {};
  /** Called with every change of the episodes held (the server keeps the global sum). */
  private readonly onHeld: (delta: number) => void;
  /** The bytes the session holds (budget.ts): held groups' frames, its rollouts' play, its env sessions. */
  readonly memory: SessionMemory;

  constructor(onHeld: (delta: number) => void, memory: SessionMemory) {
    this.onHeld = onHeld;
    this.memory = memory;
  }

  /** The current connection's sending side (null while detached). */
  get outbound(): Outbound | null {
    return this.out;
  }

  /** Finished groups the client has not acknowledged: queued or in flight. */
  get unacknowledgedGroups(): number {
    return this.unackedTotal;
  }

  /** Nothing running, nothing held, nothing waiting to be sent or acknowledged. */
  get idle(): boolean {
    return (
      this.rollouts.size === 0 &&
      this.held === 0 &&
      this.queuedFrames === 0 &&
      this.unacknowledgedGroups === 0
    );
  }

  /** Episodes held against the budget. */
  get episodesHeld(): number {
    return this.held;
  }

  /** Group frames waiting in the outbox (for credit, or for the socket to drain). */
  get queuedFrames(): number {
    return this.outbox.length;
  }

  /** True while rollout id `id` is running, has an unconfirmed batch frame or unacknowledged groups. */
  holdsRollout(id: string): boolean {
    return this.rollouts.has(id) || this.unacked.has(id);
  }

  hold(episodes: number): void {
    if (this.ended || episodes === 0) return;
    this.held += episodes;
    this.onHeld(episodes);
  }

  release(episodes: number): void {
    if (this.ended || episodes === 0) return;
    const n = Math.min(episodes, this.held);
    this.held -= n;
    this.onHeld(-n);
  }

  attach(out: Outbound, resumed: boolean): void {
    if (this.graceTimer) clearTimeout(this.graceTimer);
    this.graceTimer = null;
    // A client may resume before the server has noticed its old connection drop.
    if (this.out && this.out !== out) this.out.socket.close(1000, "superseded by a resumed connection");
    this.stopPumpOnDrain?.();
    this.out = out;
    this.stopPumpOnDrain = out.onDrain(() => this.pump());
    this.credit = 0;
    if (resumed) {
      // Everything unacknowledged goes out again, before newer frames, in seq order; then the
      // verdicts (window and batch frames) of rollouts the client has not confirmed.
      const again = [...this.inflight.values()].sort((a, b) => a.seq - b.seq);
      this.inflight.clear();
      const queued = new Set(this.outbox.filter((f) => !isGroup(f)));
      const verdicts = [...this.rollouts.values()].flatMap((r) => r.verdicts.filter((f) => !queued.has(f)));
      this.outbox.unshift(...again, ...verdicts);
    }
  }

  /**
   * `out`'s socket closed; keep everything for `graceMs`, then end. A resumed session may already
   * be on a newer socket when the old one's close arrives; that close changes nothing.
   */
  detach(out: Outbound, graceMs: number): void {
    if (this.out !== out) return;
    this.stopPumpOnDrain?.();
    this.stopPumpOnDrain = null;
    this.out = null;
    this.graceTimer = setTimeout(() => this.end(), graceMs);
    this.graceTimer.unref();
  }

  end(): void {
    if (this.graceTimer) clearTimeout(this.graceTimer);
    this.graceTimer = null;
    for (const rollout of this.rollouts.values()) rollout.cancel();
    // Everything the session held goes at once; later releases (rollouts ending) change nothing.
    this.onHeld(-this.held);
    this.held = 0;
    this.memory.close();
    this.ended = true;
    this.onEnd();
  }

  /** Send now, outside the outbox (errors, env replies). */
  sendNow(frame: Frame): void {
    this.out?.send(frame);
  }

  /** A frame the next one supersedes (progress): skipped while the client's socket is congested. */
  sendDroppable(frame: Frame): void {
    this.out?.sendDroppable(frame);
  }

  /** Queues a finished group; its `episodes` stay held until the client acknowledges it. */
  enqueueGroup(rollout: string, group: number, frame: Frame, episodes = 0): void {
    const seq = ++this.seq;
    const entry = { rollout, group, seq, episodes, bytes: encodeMessage({ ...frame, seq }) };
    this.memory.charge("groups", entry.bytes.byteLength);
    this.unacked.set(rollout, (this.unacked.get(rollout) ?? 0) + 1);
    this.unackedTotal++;
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
      const key = `${rolloutId}/${group}`;
      const entry = this.inflight.get(key);
      if (!entry) {
        unknown.push(group);
        continue;
      }
      this.inflight.delete(key);
      this.release(entry.episodes);
      this.memory.charge("groups", -entry.bytes.byteLength);
      const left = (this.unacked.get(rolloutId) ?? 1) - 1;
      if (left > 0) this.unacked.set(rolloutId, left);
      else this.unacked.delete(rolloutId);
      this.unackedTotal--;
      rollout?.acknowledged();
    }
    if (batch && rollout?.batch) this.rollouts.delete(rolloutId);
    return unknown;
  }

  /** Shutdown: send the queued non-group frames (the verdicts) even where groups wait for credit. */
  flushVerdicts(): void {
    const out = this.out;
    for (const frame of this.outbox.splice(0)) if (!isGroup(frame)) out?.send(frame);
  }

  private pump(): void {
    const out = this.out;
    if (!out) return;
    // Behind a socket that is not draining, frames wait here (none is dropped) until it drains.
    while (this.outbox.length > 0 && !out.congested && out.open) {
      const next = this.outbox[0];
      if (isGroup(next)) {
        if (this.credit <= 0) return;
        this.credit--;
        this.inflight.set(`${next.rollout}/${next.group}`, next);
        this.outbox.shift();
        out.sendEncoded(next.bytes);
      } else {
        this.outbox.shift();
        out.send(next);
      }
    }
  }
}
