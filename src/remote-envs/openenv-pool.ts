// The sessions a tag holds on its OpenEnv servers (one address, or several of one image): each
// episode gets its own session, pinned for its life, on the least loaded server with room. A
// server holds at most its declared `max_sessions`; beyond that episodes wait in arrival order.
// A server that answers CAPACITY_REACHED holds fewer than declared (or serves other clients
// too): its limit drops to the sessions rollgym has open there, and the episode waits for one
// of them to end (or retries after a pause while none is ours) until capacity_wait_s runs out.
// Each session that ends there raises the limit by one again, up to the declared one, so room
// the server gains later (its other clients left) is used, at the cost of at most one refused
// connect per ended session while it stays full.
import { WaitQueue } from "../concurrency/wait-queue.ts";

export interface PoolSettings {
  /** ws:// or wss:// URLs of each server's /ws. */
  urls: readonly string[];
  /** Sessions each server is declared to hold at once. */
  maxSessions: number;
  /** A server that refused a connection is skipped for this long. */
  downMs: number;
}

export interface Server {
  readonly url: string;
  /** Sessions rollgym may hold here (the declared max_sessions, lowered by CAPACITY_REACHED). */
  limit: number;
  /** Sessions rollgym holds here now (waiting for, or in, an episode). */
  open: number;
  /** Skipped until this time (ms since the epoch) after a failed connect. */
  downUntil: number;
}

export class SessionPool {
  readonly servers: Server[];
  private readonly settings: PoolSettings;
  /** Episodes waiting for a slot; admit() sets the server before it wakes one. */
  private readonly waiting = new WaitQueue<{ server: Server | null }>();
  /**
   * Whether the env honours reset's seed, once the first episode has checked (null: not yet).
   * A string is why it does not.
   */
  seedVerdict: Promise<string | null> | null = null;

  constructor(settings: PoolSettings) {
    this.settings = settings;
    this.servers = settings.urls.map((url) => ({ url, limit: settings.maxSessions, open: 0, downUntil: 0 }));
  }

  /**
   * A slot on the least loaded server with room, waiting in arrival order for one at most
   * `waitMs` (null then: every slot stayed taken, e.g. by episodes that only end after this one
   * starts); release it after.
   */
  acquire(waitMs: number): Promise<Server | null> {
    const server = this.roomy();
    if (server && this.waiting.size === 0) {
      server.open++;
      return Promise.resolve(server);
    }
    const waiter: { server: Server | null } = { server: null };
    const timeout = new AbortController();
    const timer = setTimeout(() => timeout.abort(), waitMs);
    return this.waiting.park(waiter, timeout.signal).then(() => {
      clearTimeout(timer);
      return waiter.server;
    });
  }

  /** Gives a slot back (and probes for one more on a lowered server); waiting episodes get the room. */
  release(server: Server): void {
    server.open--;
    if (server.limit < this.settings.maxSessions) server.limit++;
    this.admit();
  }

  /** The server refused the connection: others are tried first for a while. */
  markDown(server: Server): void {
    server.downUntil = Date.now() + this.settings.downMs;
  }

  /** Some server other than `server` is up and may have room later. */
  hasAlternative(server: Server): boolean {
    const now = Date.now();
    return this.servers.some((s) => s !== server && s.downUntil <= now);
  }

  /**
   * The server answered CAPACITY_REACHED to a session it holds as `server.open` (this one
   * included): its slot is given back without a probe, and rollgym keeps to the sessions it has
   * there besides it (at least one, retried).
   */
  full(server: Server): void {
    server.limit = Math.max(1, Math.min(server.limit, server.open - 1));
    server.open--;
    this.admit();
  }

  /** Sessions open and allowed over all servers, for status lines. */
  get counts(): { open: number; limit: number; waiting: number } {
    let open = 0;
    let limit = 0;
    for (const s of this.servers) {
      open += s.open;
      limit += s.limit;
    }
    return { open, limit, waiting: this.waiting.size };
  }

  private admit(): void {
    while (this.waiting.size > 0) {
      const server = this.roomy();
      if (!server) return;
      server.open++;
      this.waiting.peek()!.server = server;
      this.waiting.wakeNext();
    }
  }

  /**
   * The least loaded server with room among those not marked down; while any server is up a
   * down one is not tried (its episodes wait for room instead), and when none is, the least
   * loaded down one is (its connect then fails with the reason).
   */
  private roomy(): Server | null {
    const now = Date.now();
    const up = this.servers.filter((s) => s.downUntil <= now);
    let best: Server | null = null;
    for (const s of up.length > 0 ? up : this.servers)
      if (s.open < s.limit && (best === null || s.open / s.limit < best.open / best.limit)) best = s;
    return best;
  }
}
