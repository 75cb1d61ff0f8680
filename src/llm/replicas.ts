// A pool of inference replicas (base URLs) that routes requests: sticky per affinity key (an
// episode keeps hitting the replica that holds its prefix cache), otherwise least-loaded. The
// pool does no HTTP itself: callers report each request's outcome through its lease, and a probe
// function is injected, so the routing can be tested without a network.
import { type Parked, WaitQueue } from "../concurrency/wait-queue.ts";
import { messageOf } from "../errors/boundary.ts";
import { RollgymError } from "../errors/catalogue.ts";

export interface ReplicaSnapshot {
  url: string;
  healthy: boolean;
  inFlight: number;
  /** Leases granted, over the pool's life. */
  requests: number;
  /** "failed" releases, over the pool's life. */
  failures: number;
  limit: number;
  /** "failed" releases since the last "ok" (or since it came back). */
  consecutiveFailures: number;
  /** Affinity keys stuck to this replica. */
  keys: number;
  /** Acquires waiting for a slot on this replica because their key sticks to it. */
  waiting: number;
  /** Why it is out of routing (and what its last probe found); null while healthy. */
  reason: string | null;
}

export interface ReplicaPoolOptions {
  /** Requests in flight per replica at most. */
  concurrency: number;
  /** Checks one replica; resolves when it answers, rejects (with the reason) when not. */
  probe: (url: string, signal: AbortSignal) => Promise<void>;
  /** Consecutive failures that take a replica out. Default 3. */
  failureThreshold?: number;
  /** Delay between probes of a replica that is out; doubles up to probeMaxMs. Defaults 500 / 5000. */
  probeIntervalMs?: number;
  probeMaxMs?: number;
  /** A probe that has not settled by then counts as failed (its signal aborts). Default 5000. */
  probeTimeoutMs?: number;
  /** Called when a replica goes out or comes back (for logs/metrics). */
  onChange?: (snapshot: ReplicaSnapshot) => void;
}

export type LeaseOutcome = "ok" | "failed" | "refused";

export interface Lease {
  readonly url: string;
  /**
   * Ends the lease. "ok": answered; "failed": connection error/5xx/timeout (counts toward taking
   * it out); "refused": answered with a client error, not the replica's fault. Calls after the
   * first are ignored.
   */
  release(outcome: LeaseOutcome): void;
}

/** The rejection of acquires pending at close(), and of acquires after it. */
export class PoolClosedError extends RollgymError<"replica_pool_closed"> {
  constructor() {
    super("replica_pool_closed", {});
    this.name = "PoolClosedError";
  }
}

/** An acquire waiting for a slot, in the free queue or in the sticky queue of its key's replica. */
interface Waiter {
  /** Null when the acquire had no key, or when its key was forgotten while it waited. */
  key: string | null;
  /** Set by grant() just before it wakes the acquire. */
  lease: Lease | null;
}

interface Replica {
  readonly index: number;
  readonly url: string;
  readonly limit: number;
  healthy: boolean;
  inFlight: number;
  requests: number;
  failures: number;
  consecutiveFailures: number;
  /** Bumped when it comes back, so outcomes of leases taken before it went out are not held against it. */
  epoch: number;
  probing: boolean;
  /** What took it out, and what its last failed probe said; null while healthy. */
  cause: string | null;
  lastProbe: string | null;
  readonly keys: Set<string>;
  /** Waiters whose key sticks here. */
  readonly sticky: WaitQueue<Waiter>;
}

function positiveInteger(value: number, name: string): number {
  if (!Number.isInteger(value) || value < 1)
    throw new RangeError(`${name} ${value} is not a positive integer`);
  return value;
}

function positiveNumber(value: number, name: string): number {
  if (!(value > 0) || !Number.isFinite(value))
    throw new RangeError(`${name} ${value} is not a positive number`);
  return value;
}

/** Resolves true after `ms`, or false as soon as `signal` aborts; leaves no timer or listener behind. */
function delay(ms: number, signal: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve(false);
    const onAbort = (): void => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve(true);
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

export class ReplicaPool {
  private readonly replicas: Replica[];
  private readonly probe: ReplicaPoolOptions["probe"];
  private readonly onChange: ReplicaPoolOptions["onChange"];
  private readonly failureThreshold: number;
  private readonly probeIntervalMs: number;
  private readonly probeMaxMs: number;
  private readonly probeTimeoutMs: number;
  private readonly affinity = new Map<string, Replica>();
  /** Waiters whose key is not stuck to a replica (or who have no key): any replica will do. */
  private readonly free = new WaitQueue<Waiter>();
  /** Queued waiters by key, to move them together when their key gets a replica or is forgotten. */
  private readonly waitersByKey = new Map<string, Set<Parked<Waiter>>>();
  private readonly closing = new AbortController();
  /** Round-robin start for ties, so equal replicas take turns. */
  private cursor = 0;

  constructor(urls: readonly string[], options: ReplicaPoolOptions) {
    if (urls.length === 0) throw new RangeError("a replica pool needs at least one URL");
    if (new Set(urls).size !== urls.length)
      throw new RangeError(`duplicate replica URLs in ${urls.join(", ")}`);
    const limit = positiveInteger(options.concurrency, "concurrency");
    this.failureThreshold = positiveInteger(options.failureThreshold ?? 3, "failureThreshold");
    this.probeIntervalMs = positiveNumber(options.probeIntervalMs ?? 500, "probeIntervalMs");
    this.probeMaxMs = Math.max(
      this.probeIntervalMs,
      positiveNumber(options.probeMaxMs ?? 5000, "probeMaxMs"),
    );
    this.probeTimeoutMs = positiveNumber(options.probeTimeoutMs ?? 5000, "probeTimeoutMs");
    this.probe = options.probe;
    this.onChange = options.onChange;
    this.replicas = urls.map((url, index) => ({
      index,
      url,
      limit,
      healthy: true,
      inFlight: 0,
      requests: 0,
      failures: 0,
      consecutiveFailures: 0,
      epoch: 0,
      probing: false,
      cause: null,
      lastProbe: null,
      keys: new Set(),
      sticky: new WaitQueue<Waiter>(),
    }));
  }

  /**
   * Waits for a slot. `affinity` (e.g. an episode key) sticks all requests with that key to the
   * replica that served its first one, while that replica is healthy; otherwise the least-loaded
   * healthy replica is chosen and becomes the key's replica. When no replica is healthy it waits
   * until a probe brings one back. Rejects with the signal's reason when `signal` aborts, and with
   * PoolClosedError on close().
   */
  async acquire(affinity: string | null, signal?: AbortSignal): Promise<Lease> {
    if (this.closing.signal.aborted) throw new PoolClosedError();
    signal?.throwIfAborted();
    const waiter: Waiter = { key: affinity, lease: null };
    // One path for all: queue, then serve whoever can be served; FIFO holds by construction.
    const parked = this.enqueue(waiter, signal);
    this.pump();
    const left = await parked.departure;
    if (left === "woken") return waiter.lease!;
    this.unindex(parked);
    if (left === "aborted") throw signal!.reason;
    throw new PoolClosedError();
  }

  /**
   * A lease at once when acquire() would grant one without waiting: no acquire is queued that
   * could take the slot first, and a replica (the key's, while healthy) has one free. Null
   * otherwise, or after close(): acquire() then waits in line (or rejects) as usual.
   */
  tryAcquire(affinity: string | null): Lease | null {
    if (this.closing.signal.aborted || this.free.size > 0) return null;
    const bound = affinity === null ? undefined : this.affinity.get(affinity);
    const replica = bound ?? this.leastLoaded();
    if (replica === undefined || replica.inFlight >= replica.limit || replica.sticky.size > 0) return null;
    if (affinity !== null && bound === undefined) {
      this.affinity.set(affinity, replica);
      replica.keys.add(affinity);
    }
    replica.inFlight++;
    replica.requests++;
    return new ReplicaLease(this, replica);
  }

  /** Forgets an affinity key (episode finished). Its queued acquires, if any, lose their stickiness. */
  forget(affinity: string): void {
    const replica = this.affinity.get(affinity);
    if (replica) {
      this.affinity.delete(affinity);
      replica.keys.delete(affinity);
    }
    const waiters = this.waitersByKey.get(affinity);
    if (!waiters) return;
    this.waitersByKey.delete(affinity);
    for (const parked of waiters) {
      parked.item.key = null;
      this.free.take(parked);
    }
    this.pump();
  }

  /**
   * Takes a replica out of routing now (it failed to pause or resume for a weight update),
   * as repeated failures would, for `reason`; its probe brings it back once it answers.
   */
  takeOutByURL(url: string, reason: string): void {
    const replica = this.replicas.find((r) => r.url === url);
    if (!replica) throw new RangeError(`${url} is not a replica of this pool`);
    if (replica.healthy) this.takeOut(replica, reason);
    else replica.cause = reason;
  }

  /** Whether `url` is in routing now. */
  isHealthy(url: string): boolean {
    return this.replicas.some((r) => r.url === url && r.healthy);
  }

  /** How many times `url` came back after going out (a restarted engine is checked again). */
  epochOf(url: string): number {
    const replica = this.replicas.find((r) => r.url === url);
    if (!replica) throw new RangeError(`${url} is not a replica of this pool`);
    return replica.epoch;
  }

  /** True while at least one replica is healthy. */
  get anyHealthy(): boolean {
    return this.replicas.some((replica) => replica.healthy);
  }

  /** Acquires waiting for a slot, over all replicas. */
  get waiting(): number {
    let waiting = this.free.size;
    for (const replica of this.replicas) waiting += replica.sticky.size;
    return waiting;
  }

  snapshot(): ReplicaSnapshot[] {
    return this.replicas.map((replica) => this.snapshotOf(replica));
  }

  /** Stops probes; pending acquires reject with PoolClosedError. Leases out may still be released. */
  close(): void {
    if (this.closing.signal.aborted) return;
    this.closing.abort(new PoolClosedError());
    this.waitersByKey.clear();
    this.free.close();
    for (const replica of this.replicas) replica.sticky.close();
  }

  private snapshotOf(replica: Replica): ReplicaSnapshot {
    return {
      url: replica.url,
      healthy: replica.healthy,
      inFlight: replica.inFlight,
      requests: replica.requests,
      failures: replica.failures,
      limit: replica.limit,
      consecutiveFailures: replica.consecutiveFailures,
      keys: replica.keys.size,
      waiting: replica.sticky.size,
      reason:
        replica.cause === null || replica.lastProbe === null
          ? replica.cause
          : `${replica.cause}; last probe: ${replica.lastProbe}`,
    };
  }

  private enqueue(waiter: Waiter, signal: AbortSignal | undefined): Parked<Waiter> {
    const key = waiter.key;
    // Keys of a replica that went out were unbound then, so a bound key's replica is healthy.
    const replica = key === null ? undefined : this.affinity.get(key);
    const parked = (replica ? replica.sticky : this.free).enter(waiter, signal);
    if (key === null) return parked;
    const waiters = this.waitersByKey.get(key);
    if (waiters) waiters.add(parked);
    else this.waitersByKey.set(key, new Set([parked]));
    return parked;
  }

  /** Drops a waiter that left from its key's set. */
  private unindex(parked: Parked<Waiter>): void {
    const key = parked.item.key;
    if (key === null) return;
    const waiters = this.waitersByKey.get(key);
    waiters?.delete(parked);
    if (waiters?.size === 0) this.waitersByKey.delete(key);
  }

  /**
   * Serves waiters while slots are free, oldest first among those that can use a free slot: the
   * head of each healthy, non-full replica's sticky queue, and the head of the free queue.
   */
  private pump(): void {
    if (this.closing.signal.aborted) return;
    for (;;) {
      let best: Parked<Waiter> | undefined;
      let target: Replica | undefined;
      let anySlot = false;
      for (const replica of this.replicas) {
        if (!replica.healthy || replica.inFlight >= replica.limit) continue;
        anySlot = true;
        const head = replica.sticky.first();
        if (head && (!best || head.arrival < best.arrival)) {
          best = head;
          target = replica;
        }
      }
      if (!anySlot) return;
      const head = this.free.first();
      if (head && (!best || head.arrival < best.arrival)) {
        best = head;
        target = this.leastLoaded();
      }
      if (!best || !target) return;
      this.grant(best, target);
    }
  }

  /** The healthy replica with a free slot and the lowest load; ties spread by total requests, then in turn. */
  private leastLoaded(): Replica | undefined {
    const n = this.replicas.length;
    let best: Replica | undefined;
    for (let step = 0; step < n; step++) {
      const replica = this.replicas[(this.cursor + step) % n];
      if (!replica.healthy || replica.inFlight >= replica.limit) continue;
      if (!best) {
        best = replica;
        continue;
      }
      // inFlight/limit compared without division.
      const load = replica.inFlight * best.limit - best.inFlight * replica.limit;
      if (load < 0 || (load === 0 && replica.requests < best.requests)) best = replica;
    }
    if (best) this.cursor = (best.index + 1) % n;
    return best;
  }

  private grant(parked: Parked<Waiter>, replica: Replica): void {
    this.unindex(parked);
    const key = parked.item.key;
    if (key !== null && !this.affinity.has(key)) {
      this.affinity.set(key, replica);
      replica.keys.add(key);
      // Its siblings waiting for any replica now stick here too.
      for (const sibling of this.waitersByKey.get(key) ?? [])
        if (sibling.queue === this.free) replica.sticky.take(sibling);
    }
    replica.inFlight++;
    replica.requests++;
    parked.item.lease = new ReplicaLease(this, replica);
    parked.queue?.wakeParked(parked);
  }

  /** A lease on `replica` ended with `outcome` (ReplicaLease.release, once). */
  released(replica: Replica, epoch: number, outcome: LeaseOutcome): void {
    replica.inFlight--;
    if (outcome === "failed") replica.failures++;
    // Outcomes from before it went out and came back say nothing about it now.
    if (epoch === replica.epoch && replica.healthy) {
      if (outcome === "ok") replica.consecutiveFailures = 0;
      else if (outcome === "failed" && ++replica.consecutiveFailures >= this.failureThreshold) {
        this.takeOut(replica, `${replica.consecutiveFailures} failed requests in a row`);
        return;
      }
    }
    this.pump();
  }

  private takeOut(replica: Replica, reason: string): void {
    replica.healthy = false;
    replica.cause = reason;
    replica.lastProbe = null;
    for (const key of replica.keys) this.affinity.delete(key);
    replica.keys.clear();
    // Its sticky waiters may go anywhere now, keeping their place in line.
    this.free.takeAll(replica.sticky);
    this.pump();
    if (!this.closing.signal.aborted && !replica.probing) {
      replica.probing = true;
      void this.probeLoop(replica);
    }
    this.notify(replica);
  }

  private bringBack(replica: Replica): void {
    replica.healthy = true;
    replica.cause = null;
    replica.lastProbe = null;
    replica.consecutiveFailures = 0;
    replica.epoch++;
    this.pump();
    this.notify(replica);
  }

  /** The one probe loop of a replica that is out: probe after a delay that doubles, until it answers or close(). */
  private async probeLoop(replica: Replica): Promise<void> {
    let wait = this.probeIntervalMs;
    try {
      for (;;) {
        if (!(await delay(wait, this.closing.signal))) return;
        const failed = await this.probeOnce(replica.url);
        if (failed === null) {
          if (!this.closing.signal.aborted) this.bringBack(replica);
          return;
        }
        replica.lastProbe = failed;
        wait = Math.min(wait * 2, this.probeMaxMs);
      }
    } finally {
      replica.probing = false;
    }
  }

  /** Null when the probe resolved within probeTimeoutMs and before close(); else why not. */
  private probeOnce(url: string): Promise<string | null> {
    const controller = new AbortController();
    const closing = this.closing.signal;
    if (closing.aborted) return Promise.resolve("the pool is closed");
    return new Promise<string | null>((resolve) => {
      // Settles on the probe or on abort, whichever comes first: a probe ignoring its signal cannot stall the loop.
      const finish = (failure: string | null): void => {
        clearTimeout(timer);
        closing.removeEventListener("abort", onClose);
        controller.signal.removeEventListener("abort", onAbort);
        resolve(failure);
      };
      const onClose = (): void => controller.abort(closing.reason);
      const onAbort = (): void => finish(messageOf(controller.signal.reason));
      const timer = setTimeout(
        () => controller.abort(new Error(`probe of ${url} timed out after ${this.probeTimeoutMs} ms`)),
        this.probeTimeoutMs,
      );
      closing.addEventListener("abort", onClose, { once: true });
      controller.signal.addEventListener("abort", onAbort, { once: true });
      let probing: Promise<void>;
      try {
        probing = this.probe(url, controller.signal);
      } catch (error) {
        probing = Promise.reject(error);
      }
      probing.then(
        () => {
          if (!controller.signal.aborted) finish(null);
        },
        (error: unknown) => {
          if (!controller.signal.aborted) finish(messageOf(error));
        },
      );
    });
  }

  private notify(replica: Replica): void {
    if (!this.onChange) return;
    try {
      this.onChange(this.snapshotOf(replica));
    } catch (error) {
      // A logging hook must not break routing or the caller's release(); surface it unhandled.
      queueMicrotask(() => {
        throw error;
      });
    }
  }
}

/** One slot on a replica: a class, not a closure per request. */
class ReplicaLease implements Lease {
  readonly url: string;
  readonly #pool: ReplicaPool;
  readonly #replica: Replica;
  /** The replica's epoch when granted. */
  readonly #epoch: number;
  #released = false;

  constructor(pool: ReplicaPool, replica: Replica) {
    this.url = replica.url;
    this.#pool = pool;
    this.#replica = replica;
    this.#epoch = replica.epoch;
  }

  release(outcome: LeaseOutcome): void {
    if (this.#released) return;
    this.#released = true;
    this.#pool.released(this.#replica, this.#epoch, outcome);
  }
}
