// Every frame the server sends to one client goes through here, so the socket's buffered bytes
// bound what a client that does not read can cost: above the pause mark the server stops reading
// from it (and callers hold back what can wait) until the socket drains; past the hard mark, or
// paused for too long, the client is closed with 4008 (docs/server.md "Backpressure").
// Reading also stops while a client has MAX_REPLIES_IN_PROGRESS replies still being prepared
// (env sessions building, token steps at the engine), so it cannot queue work faster than its
// replies go out; and after a frame whose handling (decoding included) took more than
// PACE_ABOVE_MS, for PACE_FACTOR times as long, so one client's costly frames take at most
// 1 / (1 + PACE_FACTOR) of the event loop and everyone else keeps going (docs/server.md "CPU
// per frame").
import type { Socket } from "node:net";
import type { WebSocket } from "ws";
import { CLOSE_CODES, encodeMessage } from "../../protocol/codec.ts";
import { WaitQueue } from "../concurrency/wait-queue.ts";

export interface SendLimits {
  /** Buffered bytes above which reading stops and deferrable frames wait. */
  sendPauseBytes: number;
  /** Buffered bytes past which the client is closed (a single larger frame on an empty buffer is still sent). */
  maxSendBufferBytes: number;
  /** How long the socket may stay above the pause mark before the client is closed. */
  sendStallMs: number;
}

/** Client frames whose replies may be in preparation at once before reading stops. */
const MAX_REPLIES_IN_PROGRESS = 16;

/** A frame handled in more than this many ms pauses its client's next frames (below). */
const PACE_ABOVE_MS = 2;
/** A client whose frame took t ms is not read for PACE_FACTOR × t ms afterwards. */
const PACE_FACTOR = 4;

export class Outbound {
  readonly socket: WebSocket;
  private readonly limits: SendLimits;
  /** The socket holds more than the pause mark. */
  private congestedNow = false;
  /** Reading from the client is paused (congested, or too many replies in progress). */
  private readingPaused = false;
  private inProgress = 0;
  /** Not reading after a costly frame, until the pace timer fires. */
  private pacing = false;
  private paceTimer: NodeJS.Timeout | null = null;
  /** Time this client was paused after its costly frames (ms; for tests). */
  pacedMs = 0;
  private stallTimer: NodeJS.Timeout | null = null;
  /** Handlers of client frames that ws had already read when reading paused: run in order later. */
  private readonly deferred = new WaitQueue<() => void>();
  /** The most bytes the socket has held after a send, and the most deferred frames (for tests and benches). */
  peakBufferedBytes = 0;
  peakDeferred = 0;
  /** Run when the socket has drained below the pause mark (send again). */
  private readonly drainListeners = new Set<() => void>();

  constructor(socket: WebSocket, limits: SendLimits) {
    this.socket = socket;
    this.limits = limits;
    socket.once("close", () => {
      this.clearStall();
      if (this.paceTimer) clearTimeout(this.paceTimer);
      this.deferred.close();
    });
  }

  get open(): boolean {
    return this.socket.readyState === this.socket.OPEN;
  }

  /** True while the client's buffered replies are above the pause mark. */
  get congested(): boolean {
    return this.congestedNow;
  }

  onDrain(listener: () => void): () => void {
    this.drainListeners.add(listener);
    return () => this.drainListeners.delete(listener);
  }

  /** Runs `task` (handling one client frame) now, or after the earlier deferred ones once reading resumes. */
  whenFlowing(task: () => void): void {
    if (!this.open) return;
    if (!this.readingPaused && this.deferred.size === 0) {
      this.run(task);
      return;
    }
    // Run by updateReading as it wakes them, one at a time, while reading stays on.
    this.deferred.enqueue(task);
    this.peakDeferred = Math.max(this.peakDeferred, this.deferred.size);
  }

  /** Handles one client frame, and paces the client when that was costly. */
  private run(task: () => void): void {
    const start = performance.now();
    try {
      task();
    } finally {
      const took = performance.now() - start;
      if (took > PACE_ABOVE_MS && this.open) this.pace(took * PACE_FACTOR);
    }
  }

  private pace(ms: number): void {
    this.pacing = true;
    this.pacedMs += ms;
    this.updateReading();
    this.paceTimer = setTimeout(() => {
      this.paceTimer = null;
      this.pacing = false;
      this.updateReading();
    }, ms).unref();
  }

  /** Counts `reply` (the answer to a client frame, still being prepared) until it settles. */
  track<T>(reply: Promise<T>): Promise<T> {
    this.inProgress++;
    this.updateReading();
    const settled = () => {
      this.inProgress--;
      this.updateReading();
    };
    reply.then(settled, settled);
    return reply;
  }

  /** Sends `frame` unless the socket is closed or the client has passed the hard mark. */
  send(frame: object): boolean {
    return this.open && this.sendEncoded(encodeMessage(frame));
  }

  /** Sends an already encoded frame, like `send`; a string goes as a text frame (OpenEnv's JSON). */
  sendEncoded(bytes: Uint8Array | string): boolean {
    if (!this.open) return false;
    const buffered = this.socket.bufferedAmount;
    const size = typeof bytes === "string" ? Buffer.byteLength(bytes) : bytes.byteLength;
    if (buffered > 0 && buffered + size > this.limits.maxSendBufferBytes) {
      this.closeSlow(`${buffered + size} bytes unread > max_send_buffer_bytes`);
      return false;
    }
    this.socket.send(bytes);
    this.peakBufferedBytes = Math.max(this.peakBufferedBytes, this.socket.bufferedAmount);
    if (!this.congestedNow && this.socket.bufferedAmount > this.limits.sendPauseBytes) this.congest();
    return true;
  }

  /** Sends a frame that a later one supersedes (progress): skipped while congested. */
  sendDroppable(frame: object): boolean {
    return !this.congestedNow && this.send(frame);
  }

  private congest(): void {
    const raw = rawSocket(this.socket);
    if (!raw) return;
    this.congestedNow = true;
    this.updateReading();
    raw.once("drain", this.drained);
    this.stallTimer = setTimeout(
      () => this.closeSlow(`replies unread for ${this.limits.sendStallMs / 1000} s (send_stall_s)`),
      this.limits.sendStallMs,
    );
    this.stallTimer.unref();
  }

  private readonly drained = (): void => {
    if (!this.open) return;
    if (this.socket.bufferedAmount > this.limits.sendPauseBytes) {
      rawSocket(this.socket)?.once("drain", this.drained);
      return;
    }
    this.clearStall();
    this.congestedNow = false;
    this.updateReading();
    for (const listener of [...this.drainListeners]) {
      if (this.congestedNow || !this.open) break;
      listener();
    }
  };

  /** Reads (and runs deferred frames) exactly while the socket drains and few replies are pending. */
  private updateReading(): void {
    if (!this.open) return;
    const stop = this.congestedNow || this.pacing || this.inProgress >= MAX_REPLIES_IN_PROGRESS;
    if (stop && !this.readingPaused) {
      this.readingPaused = true;
      this.socket.pause();
    } else if (!stop && this.readingPaused) {
      this.readingPaused = false;
      this.socket.resume();
      while (this.deferred.size > 0 && !this.readingPaused && this.open) this.run(this.deferred.wakeNext()!);
    }
  }

  private clearStall(): void {
    if (this.stallTimer) clearTimeout(this.stallTimer);
    this.stallTimer = null;
  }

  /** The client does not read: close it (ws destroys the socket if the close handshake never completes). */
  private closeSlow(why: string): void {
    this.clearStall();
    this.deferred.close();
    if (this.socket.readyState !== this.socket.OPEN) return;
    this.socket.close(CLOSE_CODES.slowReader, `client not reading: ${why}`.slice(0, 120));
    // Read again so the client's answer to the close can arrive (its other frames are ignored).
    this.socket.resume();
  }
}

/** ws's TCP socket, whose `drain` says the kernel took the buffered bytes. */
function rawSocket(socket: WebSocket): Socket | undefined {
  return (socket as unknown as { _socket?: Socket })._socket;
}
