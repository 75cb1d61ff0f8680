// The TypeScript client of protocol/PROTOCOL.md: binary msgpack frames over one WebSocket, the
// hello → welcome handshake, and waits for a frame. It takes any socket with the standard
// WebSocket event API (the browser's, or `ws` in Node), so the page's watch view, the bench's
// trainer, the attack bench and the tests speak the protocol through this one class; node.ts
// opens the socket with `ws` (headers, a local address, reading paused).
import { decodeFrame, encodeMessage } from "../../protocol/codec.ts";
import { PROTOCOL_VERSION } from "../../protocol/version.ts";
import { WaitQueue } from "../concurrency/wait-queue.ts";

export type Frame = Record<string, unknown> & { type: string };

/** What the client needs of a WebSocket: the standard event API, with binary frames. */
export interface FrameSocket {
  readonly readyState: number;
  send(data: Uint8Array<ArrayBuffer>): void;
  close(code?: number): void;
  addEventListener(type: "message", listener: (event: { data: unknown }) => void): void;
  addEventListener(type: "close", listener: (event: { code: number; reason: unknown }) => void): void;
}

/** WebSocket.OPEN, the same in the browser and in `ws`. */
const OPEN = 1;

/** How long `next` waits by default: a frame that never comes is reported, not waited for forever. */
export const DEFAULT_WAIT_MS = 60_000;

export interface ClientOptions {
  /**
   * Keep every frame and its bytes (`received`, `raw`), so `next` finds frames that already
   * came too: for tests and the attack bench, which read the whole conversation. Defaults to
   * false (a long run keeps nothing).
   */
  record?: boolean;
  /** A close fails every wait still pending (else a wait ends by its frame or its timeout). Defaults to false. */
  closeFailsWaits?: boolean;
}

/** The hello a client sends unless it says more (PROTOCOL.md "Handshake"). */
export function helloFrame(client: string, extra: Record<string, unknown> = {}): Frame {
  return { type: "hello", protocol: PROTOCOL_VERSION, client, ...extra };
}

/** The error a close gives the waits and requests it ends. */
export function closedError(code: number, reason: string): Error {
  return new Error(`the server closed the WebSocket (${code}${reason.length ? ` ${reason}` : ""})`);
}

/** A wait for the first frame `match` accepts; `frame` is that frame once it came. */
interface FrameWait {
  readonly match: (frame: Frame) => boolean;
  frame: Frame | null;
}

export class ProtocolClient<Socket extends FrameSocket = FrameSocket> {
  readonly socket: Socket;
  /** Every frame received, in order (only when recording). */
  readonly received: Frame[] = [];
  /** Every frame's bytes as they arrived, beside `received` (for byte-for-byte comparisons). */
  readonly raw: Uint8Array[] = [];
  closeCode: number | null = null;
  closeReason = "";
  private readonly record: boolean;
  private readonly closeFailsWaits: boolean;
  private readonly waits = new WaitQueue<FrameWait>();
  private readonly frameListeners = new Set<(frame: Frame) => void>();
  private readonly closeListeners = new Set<(code: number, reason: string) => void>();

  constructor(socket: Socket, options: ClientOptions = {}) {
    this.socket = socket;
    this.record = options.record ?? false;
    this.closeFailsWaits = options.closeFailsWaits ?? false;
    socket.addEventListener("message", (event) => this.receive(event.data));
    socket.addEventListener("close", (event) => this.ended(event.code, String(event.reason)));
  }

  /** Calls `listener` with every frame, after the waits it ends. */
  onFrame(listener: (frame: Frame) => void): void {
    this.frameListeners.add(listener);
  }

  /** Calls `listener` once the socket closes, after the waits the close ends. */
  onClose(listener: (code: number, reason: string) => void): void {
    this.closeListeners.add(listener);
  }

  /** Encodes and sends `frame`; nothing once the socket is no longer open. */
  send(frame: Record<string, unknown>): void {
    // msgpack's encoder writes into an ArrayBuffer (never a shared one), as the browser's send needs.
    if (this.socket.readyState === OPEN) this.socket.send(encodeMessage(frame) as Uint8Array<ArrayBuffer>);
  }

  /** Says hello; resolves with the answer, `welcome` or `error`. */
  hello(frame: Frame, timeoutMs: number | null = DEFAULT_WAIT_MS): Promise<Frame> {
    const answer = this.next((f) => f.type === "welcome" || f.type === "error", timeoutMs);
    this.send(frame);
    return answer;
  }

  /**
   * The first frame matching `match`: one already received (when recording) or the next to
   * come. Rejects after `timeoutMs` (null: never).
   */
  async next(match: (frame: Frame) => boolean, timeoutMs: number | null = DEFAULT_WAIT_MS): Promise<Frame> {
    const seen = this.received.find(match);
    if (seen) return seen;
    if (this.closeFailsWaits && this.closeCode !== null) throw closedError(this.closeCode, this.closeReason);
    const wait: FrameWait = { match, frame: null };
    const signal = timeoutMs === null ? undefined : AbortSignal.timeout(timeoutMs);
    const departure = await this.waits.park(wait, signal);
    if (wait.frame) return wait.frame;
    if (departure === "aborted") throw new Error("timed out waiting for a frame");
    throw closedError(this.closeCode ?? 1006, this.closeReason);
  }

  /** Resolves once the socket has closed. */
  closed(): Promise<void> {
    if (this.closeCode !== null) return Promise.resolve();
    return new Promise((resolve) => this.onClose(() => resolve()));
  }

  /** The frames of one type received so far (when recording). */
  of(type: string): Frame[] {
    return this.received.filter((f) => f.type === type);
  }

  close(code?: number): void {
    this.socket.close(code);
  }

  private receive(data: unknown): void {
    // The browser hands an ArrayBuffer (binaryType "arraybuffer"); `ws` a Buffer.
    const bytes = data instanceof ArrayBuffer ? new Uint8Array(data) : (data as Uint8Array);
    const frame = decodeFrame(bytes) as Frame;
    if (this.record) {
      this.raw.push(bytes);
      this.received.push(frame);
    }
    this.waits.wakeWhere((wait) => {
      if (!wait.match(frame)) return false;
      wait.frame = frame;
      return true;
    });
    for (const listener of this.frameListeners) listener(frame);
  }

  private ended(code: number, reason: string): void {
    this.closeCode = code;
    this.closeReason = reason;
    if (this.closeFailsWaits) this.waits.close();
    const listeners = [...this.closeListeners];
    this.closeListeners.clear();
    for (const listener of listeners) listener(code, reason);
  }
}
