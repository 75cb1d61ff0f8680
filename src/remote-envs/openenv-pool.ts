// The sessions a tag holds on its OpenEnv servers (one address, or several of one image): each
// episode gets its own session, pinned for its life, on the least loaded server with room. A
// server holds at most its declared `max_sessions`; beyond that episodes wait in arrival order,
// for as long as the tag's sessions make progress: waiting behind rollgym's own episodes is never
// a capacity problem. Only sessions nothing steps (an env_open holding more episodes than
// sessions) make a waiting episode give up after capacity_wait_s.
//
// A server that answers CAPACITY_REACHED holds fewer than declared (or serves other clients
// too). Its limit drops to the sessions rollgym has open there, and its ceiling to the
// max_sessions it reports (OpenEnv's error carries it) or, when it reports none, to that same
// count: the limit climbs back as sessions end, up to the ceiling, never past it, so an
// over-declared max_sessions costs one wave of refused connects, not one per episode. The
// ceiling is forgotten once the tag has no session there and no episode waiting (the server may
// have been resized, or its other clients have left, by the next batch).
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
  /** The most `limit` climbs back to: the declared max_sessions, or what the server was seen to hold. */
  ceiling: number;
  /** Sessions rollgym holds here now (waiting for, or in, an episode). */
  open: number;
  /** Sessions rollgym has let go here whose sockets the server has not closed yet. */
  closing: number;
  /** Skipped until this time (ms since the epoch) after a failed connect. */
  downUntil: number;
}

/** What a CAPACITY_REACHED said about the server's sessions, when it said it. */
export interface ServerCounts {
  maxSessions: number | null;
}

export class SessionPool {
  readonly servers: Server[];
  private readonly settings: PoolSettings;
  /** Episodes waiting for a slot; admit() sets the server before it wakes one. */
  private readonly waiting = new WaitQueue<{ server: Server | null }>();
  /** When a session of the tag last answered, ended or was refused (ms since the epoch). */
  private lastProgress = Date.now();
  /**
   * Whether the env honours reset's seed, once an episode has checked (null: not yet). A string
   * is why it does not; undefined, that the check failed on the wire and says nothing.
   */
  seedVerdict: Promise<string | null | undefined> | null = null;

  constructor(settings: PoolSettings) {
    this.settings = settings;
    this.servers = settings.urls.map((url) => ({
      url,
      limit: settings.maxSessions,
      ceiling: settings.maxSessions,
      open: 0,
      closing: 0,
      downUntil: 0,
    }));
  }

  /**
   * A slot on the least loaded server with room, waiting in arrival order while the tag's
   * sessions make progress; null once none has answered or ended for `stallMs` since this call
   * (every slot held by an episode that nothing steps). Release it after.
   */
  acquire(stallMs: number): Promise<Server | null> {
    const server = this.roomy();
    if (server && this.waiting.size === 0) {
      server.open++;
      return Promise.resolve(server);
    }
    const waiter: { server: Server | null } = { server: null };
    const since = Date.now();
    const stalled = new AbortController();
    let timer: NodeJS.Timeout;
    const check = () => {
      const quiet = Date.now() - Math.max(since, this.lastProgress);
      if (quiet >= stallMs) stalled.abort();
      else timer = setTimeout(check, stallMs - quiet);
    };
    timer = setTimeout(check, stallMs);
    return this.waiting.park(waiter, stalled.signal).then(() => {
      clearTimeout(timer);
      return waiter.server;
    });
  }

  /** A session of the tag answered: episodes waiting behind it are not stuck. */
  progressed(): void {
    this.lastProgress = Date.now();
  }

  /**
   * Gives a slot back; `closed` settles once the server has closed its socket, and only then is
   * the slot offered again (a server that has not seen the close yet would refuse the next one).
   */
  release(server: Server, closed: Promise<void> = Promise.resolve()): void {
    server.open--;
    server.closing++;
    this.progressed();
    // The tag's episodes there are all over: the next batch tries the declared limit again.
    if (server.open === 0 && this.waiting.size === 0)
      server.limit = server.ceiling = this.settings.maxSessions;
    void closed.then(() => {
      server.closing--;
      if (server.limit < server.ceiling) server.limit++;
      this.admit();
    });
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
   * included): rollgym keeps to the sessions it has there besides it (at least one, retried)
   * and never climbs past what the server reported. Whether rollgym's own sessions there explain
   * the refusal (the episode then waits for one of them instead of for the server).
   */
  full(server: Server, counts: ServerCounts): boolean {
    const ours = server.open - 1 + server.closing;
    server.ceiling = Math.max(1, Math.min(server.ceiling, counts.maxSessions ?? ours));
    server.limit = Math.max(1, Math.min(server.limit, ours, server.ceiling));
    server.open--;
    this.progressed();
    this.admit();
    return ours > 0;
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
   * loaded down one is (its connect then fails with the reason). A socket still closing holds
   * its room.
   */
  private roomy(): Server | null {
    const now = Date.now();
    const up = this.servers.filter((s) => s.downUntil <= now);
    const load = (s: Server) => (s.open + s.closing) / s.limit;
    let best: Server | null = null;
    for (const s of up.length > 0 ? up : this.servers)
      if (s.open + s.closing < s.limit && (best === null || load(s) < load(best))) best = s;
    return best;
  }
}
