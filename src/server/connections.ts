// Connection caps and timeouts, so that sockets nobody uses cannot pile up until the server runs
// out of file descriptors: HTTP requests must arrive within a short time, WebSocket connections
// are capped (server-wide and per remote address), a WebSocket must send hello within a short
// time, and connections that have not finished their handshake are capped with the oldest
// dropped first. New connections are always accepted, so /healthz keeps answering under a flood.
import type { IncomingMessage, Server } from "node:http";
import type { Socket } from "node:net";
import type { WebSocket } from "ws";
import { CLOSE_CODES } from "../../protocol/codec.ts";
import type { LimitValues } from "../../protocol/settings.ts";
import { WaitQueue } from "../concurrency/wait-queue.ts";
import { RollgymError } from "../errors/catalogue.ts";
import { limitDefaults } from "./limits.ts";

/** Connection caps and timeouts (protocol/settings.ts LIMITS, part "connections"), by option name. */
export type ConnectionLimits = LimitValues<"connections">;

/** What the guard knows of an open WebSocket: when it last did work, and whether it holds work. */
export interface ConnectionTicket {
  /** Its hello was accepted (the hello timeout stops; counts as work). */
  hello(): void;
  /**
   * It did useful work: sent a frame that asks the server for something or moves its work on
   * (a rollout, an env step, an ack of held groups, …), or work the server did for it ended (a
   * rollout's verdict). Frames that cost a client nothing and ask for nothing (`credit`, an ack
   * of nothing, a refused frame) do not count, so sending them every few seconds does not keep
   * a socket from being dropped at max_connections (issue 28.4).
   */
  worked(): void;
  /** Whether it holds work the server is doing for it (running rollouts, a watch); set by the connection. */
  holding: () => boolean;
}

export const DEFAULT_CONNECTION_LIMITS: ConnectionLimits = limitDefaults("connections");

/** The HTTP timeouts as fastify's server options (fastify sets some after creating the server). */
export function httpServerOptions(limits: ConnectionLimits) {
  return {
    http: {
      headersTimeout: limits.headersTimeoutMs,
      requestTimeout: limits.requestTimeoutMs,
      // Node checks the two timeouts above every 30 s by default, which lets a half-sent request
      // live that much longer.
      connectionsCheckingInterval: Math.max(10, Math.min(1_000, limits.headersTimeoutMs / 4)),
    },
    requestTimeout: limits.requestTimeoutMs,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
  };
}

/**
 * WebSocket handshakes completed per turn of the event loop; the rest of a storm waits, in
 * order, for the next turns, so requests that arrived meanwhile (/healthz) are answered between.
 */
export const UPGRADES_PER_TURN = 16;

export class ConnectionGuard {
  readonly limits: ConnectionLimits;
  /** Handshakes waiting for a later turn of the event loop, and how many this turn has done. */
  private readonly upgrades = new WaitQueue<() => void>();
  private upgradesThisTurn = 0;
  /** Connections not past their handshake, oldest first, with how to drop each. */
  private readonly pending = new Map<Socket, () => void>();
  private readonly perAddress = new Map<string, number>();
  private open = 0;
  /** Open WebSockets past their hello, with when they last did work and their remote address. */
  private readonly talking = new Map<
    WebSocket,
    { last: number; address: string; ticket: ConnectionTicket }
  >();

  constructor(limits: Partial<ConnectionLimits> = {}) {
    this.limits = { ...DEFAULT_CONNECTION_LIMITS, ...limits };
  }

  /** Watches the server's connections and requests. */
  attach(server: Server): void {
    server.on("connection", (socket: Socket) => {
      this.hold(socket, () => socket.destroy());
      socket.once("close", () => this.pending.delete(socket));
    });
    server.on("request", (request: IncomingMessage, response) => {
      const socket = request.socket;
      this.pending.delete(socket);
      // Between requests a keep-alive connection is idle: pending again.
      response.once("finish", () => {
        if (!socket.destroyed) this.hold(socket, () => socket.destroy());
      });
    });
  }

  /** Why an upgrade to a WebSocket is refused, or null when it may go ahead. */
  refusal(request: IncomingMessage): RollgymError | null {
    const { maxConnections, maxConnectionsPerAddress } = this.limits;
    if (this.open >= maxConnections && !this.dropIdle())
      return new RollgymError("max_connections", { max: maxConnections });
    if ((this.perAddress.get(addressOf(request)) ?? 0) >= maxConnectionsPerAddress)
      return new RollgymError("max_connections_per_address", { max: maxConnectionsPerAddress });
    return null;
  }

  /**
   * Closes the connection idle longest (no work for idleDropMs, holding nothing) with 4011, to
   * make room for a new one; false when there is none. Its place counts as free at once.
   */
  private dropIdle(): boolean {
    const before = performance.now() - this.limits.idleDropMs;
    let oldest: WebSocket | null = null;
    let oldestAt = Number.POSITIVE_INFINITY;
    for (const [ws, { last, ticket }] of this.talking)
      if (last <= before && last < oldestAt && !ticket.holding()) {
        oldest = ws;
        oldestAt = last;
      }
    if (oldest === null) return false;
    this.talking.delete(oldest);
    void closeWithin(
      oldest,
      CLOSE_CODES.idleDropped,
      `idle for ${Math.round((performance.now() - oldestAt) / 1000)} s with nothing held; dropped for a new connection`,
      1_000,
    );
    return true;
  }

  /**
   * Runs `handshake` in this turn of the event loop if fewer than UPGRADES_PER_TURN have run in
   * it, else in a later one, in arrival order.
   */
  upgrade(handshake: () => void): void {
    if (this.upgrades.size === 0 && this.upgradesThisTurn < UPGRADES_PER_TURN) {
      if (this.upgradesThisTurn++ === 0) setImmediate(this.nextTurn);
      handshake();
      return;
    }
    // Run by nextTurn as it wakes them, so a turn's handshakes complete within it.
    this.upgrades.enqueue(handshake);
  }

  private readonly nextTurn = (): void => {
    this.upgradesThisTurn = Math.min(this.upgrades.size, UPGRADES_PER_TURN);
    if (this.upgradesThisTurn === 0) return;
    setImmediate(this.nextTurn);
    for (let left = this.upgradesThisTurn; left > 0; left--) this.upgrades.wakeNext()!();
  };

  /** Counts an upgraded WebSocket until it closes, and holds it as pending until its hello. */
  opened(ws: WebSocket, request: IncomingMessage): ConnectionTicket {
    const address = addressOf(request);
    const socket = request.socket;
    this.open++;
    this.perAddress.set(address, (this.perAddress.get(address) ?? 0) + 1);
    const seconds = this.limits.helloTimeoutMs / 1000;
    const timer = setTimeout(
      () => closeWithin(ws, CLOSE_CODES.helloTimeout, `no hello within ${seconds} s`, 1_000),
      this.limits.helloTimeoutMs,
    );
    this.hold(socket, () =>
      closeWithin(ws, CLOSE_CODES.helloTimeout, "too many connections are waiting for their hello", 1_000),
    );
    ws.once("close", () => {
      clearTimeout(timer);
      this.pending.delete(socket);
      this.talking.delete(ws);
      this.open--;
      const left = (this.perAddress.get(address) ?? 1) - 1;
      if (left > 0) this.perAddress.set(address, left);
      else this.perAddress.delete(address);
    });
    const ticket: ConnectionTicket = {
      hello: () => {
        if (this.talking.has(ws)) return; // OpenEnv sockets call it for every well-formed message
        clearTimeout(timer);
        this.pending.delete(socket);
        this.talking.set(ws, { last: performance.now(), address, ticket });
      },
      worked: () => {
        const entry = this.talking.get(ws);
        if (entry) entry.last = performance.now();
      },
      holding: () => false,
    };
    return ticket;
  }

  /** When the client of a WebSocket past its hello last did work (performance.now()). */
  lastWork(ws: WebSocket): number | undefined {
    return this.talking.get(ws)?.last;
  }

  /** The remote address of a WebSocket past its hello. */
  address(ws: WebSocket): string | undefined {
    return this.talking.get(ws)?.address;
  }

  /** Drops every pending connection (at shutdown, so closing the server does not wait on them). */
  dropPending(): void {
    for (const drop of [...this.pending.values()]) drop();
    this.pending.clear();
  }

  private hold(socket: Socket, drop: () => void): void {
    this.pending.delete(socket); // re-inserted: it is now the newest
    this.pending.set(socket, drop);
    while (this.pending.size > this.limits.maxPendingConnections) {
      const [oldest, dropOldest] = this.pending.entries().next().value!;
      this.pending.delete(oldest);
      dropOldest();
    }
  }
}

/** Sockets the heartbeat ended because they stopped answering pings. */
const silenced = new WeakSet<WebSocket>();

/** Whether the heartbeat ended `ws` (it stopped answering pings), rather than a close or a drop. */
export function endedByHeartbeat(ws: WebSocket): boolean {
  return silenced.has(ws);
}

/**
 * Pings every WebSocket each `intervalMs`; one that has not answered the previous ping (a
 * half-open connection, a client gone without a FIN) is dropped. Returns how to stop it.
 */
export function heartbeat(clients: () => Iterable<WebSocket>, intervalMs: number): () => void {
  const listening = new WeakSet<WebSocket>();
  const answered = new WeakMap<WebSocket, boolean>();
  const sweep = (): void => {
    for (const ws of clients()) {
      if (ws.readyState !== ws.OPEN) continue;
      if (!listening.has(ws)) {
        listening.add(ws);
        answered.set(ws, true);
        ws.on("pong", () => answered.set(ws, true));
      }
      // Replies waiting in its buffer: backpressure owns it (send_stall_s closes it with 4008).
      if (!answered.get(ws) && ws.bufferedAmount === 0) {
        silenced.add(ws);
        ws.terminate();
        continue;
      }
      answered.set(ws, false);
      ws.ping();
    }
  };
  // Swept after the poll phase: a stalled loop runs due timers before it reads the sockets,
  // and a pong that has arrived but is unread must still count.
  const timer = setInterval(() => setImmediate(sweep), intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}

/**
 * Closes with a close frame, and drops the TCP connection if the close handshake has not finished
 * within `graceMs` (a client that does not read never answers it). Resolves once closed: true
 * when it had to be dropped.
 */
export function closeWithin(ws: WebSocket, code: number, reason: string, graceMs: number): Promise<boolean> {
  if (ws.readyState === ws.CLOSED) return Promise.resolve(false);
  return new Promise((resolve) => {
    let dropped = false;
    const timer = setTimeout(() => {
      dropped = true;
      ws.terminate();
    }, graceMs);
    ws.once("close", () => {
      clearTimeout(timer);
      resolve(dropped);
    });
    if (ws.readyState === ws.OPEN) ws.close(code, reason);
  });
}

function addressOf(request: IncomingMessage): string {
  return request.socket.remoteAddress ?? "unknown";
}
