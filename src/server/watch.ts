// Watch subscriptions: read-only copies of every rollout's groups and verdicts (an endless
// stream's window by window) for the web page and other observers. A watcher takes no part in credit, acknowledgement or resume, and a slow
// one loses frames (and is told so with a `watch_gap`) rather than hold anything back: frames
// are encoded once for all watchers and dropped for a watcher whose socket already buffers more
// than `maxBufferBytes`.
import type { WebSocket } from "ws";
import { encodeMessage } from "../../protocol/codec.ts";
import type {
  BatchFrame,
  Version,
  WatchBatch,
  WatchedRollout,
  WatchGap,
  WatchGroup,
  Watching,
  WatchWindow,
  WindowFrame,
} from "../../protocol/messages.ts";
import type { LimitValues } from "../../protocol/settings.ts";
import { RollgymError } from "../errors/catalogue.ts";
import type { EpisodeRecord, GroupResult } from "../record/episode-record.ts";
import { limitDefaults } from "./limits.ts";

/** Watch subscriptions' limits (protocol/settings.ts LIMITS, part "watch"), by option name. */
export type WatchLimits = LimitValues<"watch">;

export const DEFAULT_WATCH_LIMITS: WatchLimits = limitDefaults("watch");

/** What the hub learns of a watcher's connection from the connection guard (connections.ts). */
export interface WatcherConnections {
  /** When the socket's client last did work (performance.now()); every watcher is past its hello. */
  lastWork(socket: WebSocket): number | undefined;
  /** The socket's remote address. */
  address(socket: WebSocket): string | undefined;
}

/** How often a watcher that lost frames is checked for room to send its gap notice. */
const GAP_POLL_MS = 200;

interface Watcher {
  socket: WebSocket;
  address: string;
  dropped: number;
  streams: Set<number>;
  timer: NodeJS.Timeout | null;
}

/** What a running rollout reports to its watchers. */
export interface WatchedStream {
  group(group: number, episodes: readonly EpisodeRecord[]): void;
  verdict(batch: BatchFrame, groups: readonly GroupResult[]): void;
  /** An endless stream's window verdict; `version`: the one in force as it was made. */
  window(frame: WindowFrame, version: Version): void;
  failed(message: string): void;
}

export class WatchHub {
  readonly limits: WatchLimits;
  private readonly watchers = new Map<WebSocket, Watcher>();
  private readonly running = new Map<number, WatchedRollout>();
  private lastStream = 0;

  private readonly connections: WatcherConnections;

  constructor(limits: Partial<WatchLimits>, connections: WatcherConnections) {
    this.limits = { ...DEFAULT_WATCH_LIMITS, ...limits };
    this.connections = connections;
  }

  get size(): number {
    return this.watchers.size;
  }

  /** The most any watcher's socket buffers, and the frames lost and not yet reported. */
  stats(): { maxBuffered: number; unreported: number } {
    let maxBuffered = 0;
    let unreported = 0;
    for (const w of this.watchers.values()) {
      maxBuffered = Math.max(maxBuffered, w.socket.bufferedAmount);
      unreported += w.dropped;
    }
    return { maxBuffered, unreported };
  }

  /** Whether `socket` holds a watch subscription. */
  watching(socket: WebSocket): boolean {
    return this.watchers.has(socket);
  }

  /**
   * Subscribes `socket` (true) or sends a subscribed one `watching` again (false). Throws the
   * `limit` error of max_watchers_per_address or max_watchers when its address or the server
   * has that many subscriptions and none of them has been idle for `idleMs` (one that has is
   * ended to make room).
   */
  subscribe(socket: WebSocket): boolean {
    const added = !this.watchers.has(socket);
    if (added) {
      const address = this.connections.address(socket) ?? "unknown";
      const { maxWatchers, maxWatchersPerAddress } = this.limits;
      const ofAddress = [...this.watchers.values()].filter((w) => w.address === address);
      if (
        ofAddress.length >= maxWatchersPerAddress &&
        !this.endIdle(ofAddress, "max_watchers_per_address", maxWatchersPerAddress)
      )
        throw new RollgymError("max_watchers_per_address", { max: maxWatchersPerAddress });
      if (
        this.watchers.size >= maxWatchers &&
        !this.endIdle(this.watchers.values(), "max_watchers", maxWatchers)
      )
        throw new RollgymError("max_watchers", { max: maxWatchers });
      this.watchers.set(socket, { socket, address, dropped: 0, streams: new Set(), timer: null });
    }
    const watching: Watching = {
      type: "watching",
      limits: {
        max_watchers: this.limits.maxWatchers,
        max_watch_buffer_bytes: this.limits.maxBufferBytes,
      },
      rollouts: [...this.running.values()].map((r) => ({ ...r })),
    };
    socket.send(encodeMessage(watching));
    return added;
  }

  unsubscribe(socket: WebSocket): void {
    const watcher = this.watchers.get(socket);
    if (watcher?.timer) clearInterval(watcher.timer);
    this.watchers.delete(socket);
  }

  /**
   * Ends the subscription of `among` whose connection has done no work for the longest, if that
   * is at least idleMs, telling it which limit it made room under; false when there is none.
   */
  private endIdle(
    among: Iterable<Watcher>,
    limit: "max_watchers" | "max_watchers_per_address",
    max: number,
  ): boolean {
    const before = performance.now() - this.limits.idleMs;
    let idle: Watcher | null = null;
    let idleSince = before;
    for (const w of among) {
      const last = this.connections.lastWork(w.socket) ?? Number.POSITIVE_INFINITY;
      if (last <= idleSince) {
        idle = w;
        idleSince = last;
      }
    }
    if (!idle) return false;
    this.unsubscribe(idle.socket);
    if (idle.socket.readyState === idle.socket.OPEN)
      idle.socket.send(
        encodeMessage({
          type: "error",
          code: "limit",
          field: "watch_idle_s",
          message: `${limit} is ${max} and this watch's connection did no work for ${Math.round((performance.now() - idleSince) / 1000)} s (watch_idle_s is ${this.limits.idleMs / 1000}; credit frames are no work); it ended to make room for a new one: send watch again to resubscribe`,
        }),
      );
    return true;
  }

  /** A rollout started: announce it and return what its engine reports through. */
  start(rollout: Omit<WatchedRollout, "stream" | "groups_done">): WatchedStream {
    const stream = ++this.lastStream;
    const info: WatchedRollout = { stream, ...rollout, groups_done: 0 };
    this.running.set(stream, info);
    this.broadcast(stream, { type: "watch_rollout", ...info });
    const end = (frame: WatchBatch) => {
      this.running.delete(stream);
      this.broadcast(stream, frame);
    };
    return {
      group: (group, episodes) => {
        info.groups_done++;
        if (this.watchers.size === 0) return;
        const frame: WatchGroup = {
          type: "watch_group",
          stream,
          rollout: info.rollout,
          group,
          tag: episodes[0]?.tag ?? "",
          seed: episodes[0]?.seed ?? 0,
          // Token logs stay with the trainer; watchers get the readable record.
          episodes: episodes.map(({ tokens: _tokens, ...record }) => record),
        };
        this.broadcast(stream, frame);
      },
      window: (frame, version) => {
        const { type: _type, ...verdict } = frame;
        const watched: WatchWindow = { type: "watch_window", stream, ...verdict, version: { ...version } };
        this.broadcast(stream, watched);
      },
      verdict: (batch, groups) => {
        const scores: (number | null)[] = [];
        for (const g of groups) scores[g.group_id] = g.failed ? null : g.score;
        const { type: _type, ...verdict } = batch;
        end({
          ...verdict,
          type: "watch_batch",
          stream,
          group_scores: Array.from(scores, (s) => s ?? null),
        });
      },
      failed: (message) =>
        end({
          type: "watch_batch",
          stream,
          rollout: info.rollout,
          kept: [],
          dropped: [],
          failed_groups: [],
          group_scores: [],
          metrics: {},
          episodes: 0,
          failed: 0,
          error: message,
        }),
    };
  }

  private broadcast(
    stream: number,
    frame: WatchGroup | WatchBatch | WatchWindow | (WatchedRollout & { type: string }),
  ): void {
    if (this.watchers.size === 0) return;
    // One encoding shared by every watcher.
    const bytes = encodeMessage(frame);
    for (const watcher of this.watchers.values()) this.deliver(watcher, stream, bytes);
  }

  private deliver(watcher: Watcher, stream: number, bytes: Uint8Array): void {
    const { socket } = watcher;
    if (socket.readyState !== socket.OPEN) return;
    if (socket.bufferedAmount > this.limits.maxBufferBytes) {
      watcher.dropped++;
      watcher.streams.add(stream);
      // Tell the watcher about the gap once it drains, even if no further frame comes.
      watcher.timer ??= setInterval(() => this.flushGap(watcher), GAP_POLL_MS).unref();
      return;
    }
    this.flushGap(watcher);
    socket.send(bytes);
  }

  private flushGap(watcher: Watcher): void {
    const { socket } = watcher;
    if (watcher.dropped > 0 && socket.readyState === socket.OPEN) {
      if (socket.bufferedAmount > this.limits.maxBufferBytes) return;
      const gap: WatchGap = { type: "watch_gap", dropped: watcher.dropped, streams: [...watcher.streams] };
      socket.send(encodeMessage(gap));
    }
    watcher.dropped = 0;
    watcher.streams.clear();
    if (watcher.timer) clearInterval(watcher.timer);
    watcher.timer = null;
  }
}
