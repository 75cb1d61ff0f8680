// The replica pool's routing with fake probes and fake timers: least-loaded spreading, sticky keys,
// FIFO waiting, ejection after consecutive failures, probing back in with backoff, abort and close.
import { getEventListeners } from "node:events";
import { afterEach, describe, expect, it, vi } from "vitest";
import { type Lease, PoolClosedError, ReplicaPool, type ReplicaSnapshot } from "../../src/llm/replicas.ts";

const URLS = ["http://a", "http://b", "http://c"];

const alwaysUp = async (): Promise<void> => {};
const neverUp = async (): Promise<void> => {
  throw new Error("connection refused");
};

/** Lets resolved acquires run their continuations. */
async function flush(): Promise<void> {
  for (let i = 0; i < 5; i++) await Promise.resolve();
}

/** Tracks whether a promise has settled, without awaiting it. */
function track<T>(promise: Promise<T>): {
  settled: () => boolean;
  value: () => T | undefined;
  error: () => unknown;
} {
  let settled = false;
  let value: T | undefined;
  let error: unknown;
  promise.then(
    (v) => {
      settled = true;
      value = v;
    },
    (e: unknown) => {
      settled = true;
      error = e;
    },
  );
  return { settled: () => settled, value: () => value, error: () => error };
}

/** A small seeded PRNG (mulberry32), so the load simulation is the same on every run. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function requests(pool: ReplicaPool): number[] {
  return pool.snapshot().map((s) => s.requests);
}

function spread(counts: number[]): number {
  return (Math.max(...counts) - Math.min(...counts)) / Math.min(...counts);
}

afterEach(() => {
  vi.useRealTimers();
});

describe("least-loaded routing", () => {
  /**
   * 3,000 keyless requests: each step acquires with probability `arrival`, else ends a held lease
   * (a random one, i.e. random hold times, or the oldest, i.e. equal service times).
   */
  async function simulate(arrival: number, completion: "random" | "oldest", seed: number): Promise<number[]> {
    const pool = new ReplicaPool(URLS, { concurrency: 4, probe: alwaysUp });
    const random = rng(seed);
    const held: Lease[] = [];
    let issued = 0;
    let waiting = 0;
    while (issued < 3000 || held.length > 0 || waiting > 0) {
      if (issued < 3000 && (held.length === 0 || random() < arrival)) {
        issued++;
        waiting++;
        void pool.acquire(null).then((lease) => {
          waiting--;
          held.push(lease);
        });
      } else if (held.length > 0) {
        const index = completion === "oldest" ? 0 : Math.floor(random() * held.length);
        held.splice(index, 1)[0].release("ok");
      }
      await flush();
    }
    expect(pool.snapshot().every((s) => s.inFlight === 0)).toBe(true);
    pool.close();
    return requests(pool);
  }

  it("spreads thousands of keyless requests evenly below capacity, with random hold times", async () => {
    for (const seed of [1, 7]) {
      const counts = await simulate(0.45, "random", seed);
      expect(counts.reduce((a, b) => a + b)).toBe(3000);
      expect(spread(counts)).toBeLessThan(0.05);
    }
  });

  it("spreads thousands of keyless requests evenly at saturation, with equal service times", async () => {
    // Saturated with random hold times, the replica whose slot frees first takes the next request
    // (as it should: it is the faster one), so only equal service times can promise equal counts.
    for (const seed of [1, 7]) {
      const counts = await simulate(0.55, "oldest", seed);
      expect(counts.reduce((a, b) => a + b)).toBe(3000);
      expect(spread(counts)).toBeLessThan(0.05);
    }
  });

  it("spreads sticky episodes evenly too", async () => {
    const pool = new ReplicaPool(URLS, { concurrency: 8, probe: alwaysUp });
    const random = rng(11);
    // 600 episodes of 4 sequential requests, about 16 running at once.
    const episode = async (key: string): Promise<void> => {
      for (let turn = 0; turn < 4; turn++) {
        const lease = await pool.acquire(key);
        for (let i = Math.floor(random() * 4); i > 0; i--) await flush();
        lease.release("ok");
      }
      pool.forget(key);
    };
    const running = new Set<Promise<void>>();
    for (let e = 0; e < 600; e++) {
      if (running.size >= 16) await Promise.race(running);
      const done: Promise<void> = episode(`ep${e}`).finally(() => running.delete(done));
      running.add(done);
    }
    await Promise.all(running);
    const counts = requests(pool);
    expect(counts.reduce((a, b) => a + b)).toBe(2400);
    expect(spread(counts)).toBeLessThan(0.1);
    expect(pool.snapshot().map((s) => s.keys)).toEqual([0, 0, 0]);
    pool.close();
  });

  it("prefers the replica with the fewest requests in flight", async () => {
    const pool = new ReplicaPool(URLS, { concurrency: 4, probe: alwaysUp });
    const first = await pool.acquire(null);
    const second = await pool.acquire(null);
    const third = await pool.acquire(null);
    expect(new Set([first.url, second.url, third.url]).size).toBe(3);
    second.release("ok");
    expect((await pool.acquire(null)).url).toBe(second.url);
    pool.close();
  });
});

describe("affinity", () => {
  it("sticks a key to the replica that served its first request, even when others are less loaded", async () => {
    const pool = new ReplicaPool(URLS, { concurrency: 4, probe: alwaysUp });
    const first = await pool.acquire("ep1");
    first.release("ok");
    // Hold two of its requests: its replica is then the most loaded, and still the key's.
    const held = [await pool.acquire("ep1"), await pool.acquire("ep1")];
    for (let turn = 0; turn < 5; turn++) {
      const lease = await pool.acquire("ep1");
      expect(lease.url).toBe(first.url);
      lease.release("ok");
    }
    expect(held.map((l) => l.url)).toEqual([first.url, first.url]);
    expect((await pool.acquire(null)).url).not.toBe(first.url);
    expect(pool.snapshot().find((s) => s.url === first.url)?.keys).toBe(1);
    pool.forget("ep1");
    expect(pool.snapshot().find((s) => s.url === first.url)?.keys).toBe(0);
    pool.close();
  });

  it("waits for a full sticky replica's slot instead of moving, while keyless requests go elsewhere", async () => {
    const pool = new ReplicaPool(URLS.slice(0, 2), { concurrency: 1, probe: alwaysUp });
    const held = await pool.acquire("ep");
    const again = track(pool.acquire("ep"));
    await flush();
    expect(again.settled()).toBe(false);
    expect(pool.snapshot().find((s) => s.url === held.url)?.waiting).toBe(1);
    const keyless = await pool.acquire(null);
    expect(keyless.url).not.toBe(held.url);
    held.release("ok");
    await flush();
    expect(again.value()?.url).toBe(held.url);
    pool.close();
  });

  it("serves a freed slot to the oldest waiter that can use it", async () => {
    const pool = new ReplicaPool(["http://a"], { concurrency: 1, probe: alwaysUp });
    const held = await pool.acquire("x");
    const order: string[] = [];
    const acquire = async (key: string | null, name: string): Promise<Lease> => {
      const lease = await pool.acquire(key);
      order.push(name);
      return lease;
    };
    const acquires = [acquire(null, "keyless1"), acquire("x", "x"), acquire(null, "keyless2")];
    held.release("ok");
    for (const pending of acquires) (await pending).release("ok");
    expect(order).toEqual(["keyless1", "x", "keyless2"]);
    pool.close();
  });

  it("sticks concurrent first requests of one key to the same replica", async () => {
    const pool = new ReplicaPool(URLS.slice(0, 2), { concurrency: 1, probe: alwaysUp });
    const a = await pool.acquire(null);
    const b = await pool.acquire(null);
    const first = track(pool.acquire("ep"));
    const second = track(pool.acquire("ep"));
    const third = track(pool.acquire(null));
    a.release("ok");
    await flush();
    expect(first.value()?.url).toBe(a.url);
    b.release("ok");
    await flush();
    // The keyless one takes b's slot; the key's second request waits for its replica.
    expect(third.value()?.url).toBe(b.url);
    expect(second.settled()).toBe(false);
    first.value()?.release("ok");
    await flush();
    expect(second.value()?.url).toBe(a.url);
    pool.close();
  });

  it("forgetting a key with queued requests lets them go to any replica", async () => {
    const pool = new ReplicaPool(URLS.slice(0, 2), { concurrency: 1, probe: alwaysUp });
    const held = await pool.acquire("ep");
    const queued = track(pool.acquire("ep"));
    await flush();
    expect(queued.settled()).toBe(false);
    pool.forget("ep");
    await flush();
    expect(queued.value()?.url).not.toBe(held.url);
    expect(pool.snapshot().map((s) => s.keys)).toEqual([0, 0]);
    pool.close();
  });
});

describe("health", () => {
  it("takes a replica out after consecutive failures; ok resets the count, refused does not count", async () => {
    vi.useFakeTimers();
    const changes: ReplicaSnapshot[] = [];
    const pool = new ReplicaPool(["http://a", "http://b"], {
      concurrency: 4,
      probe: neverUp,
      onChange: (s) => changes.push(s),
    });
    const onA = async (): Promise<Lease> => {
      const lease = await pool.acquire("ep-a");
      expect(lease.url).toBe("http://a");
      return lease;
    };
    (await pool.acquire("ep-a")).release("failed");
    (await onA()).release("failed");
    (await onA()).release("ok");
    (await onA()).release("failed");
    (await onA()).release("refused");
    (await onA()).release("failed");
    expect(pool.snapshot()[0]).toMatchObject({ healthy: true, consecutiveFailures: 2, failures: 4 });
    (await onA()).release("failed");
    expect(pool.snapshot()[0]).toMatchObject({ healthy: false, failures: 5, keys: 0 });
    expect(changes).toEqual([expect.objectContaining({ url: "http://a", healthy: false })]);
    // The key moves to the other replica and sticks there.
    for (let i = 0; i < 3; i++) {
      const lease = await pool.acquire("ep-a");
      expect(lease.url).toBe("http://b");
      lease.release("ok");
    }
    expect(pool.anyHealthy).toBe(true);
    pool.close();
  });

  it("probes a replica that is out with doubling delays, one loop only, and brings it back", async () => {
    vi.useFakeTimers();
    const probes: number[] = [];
    const start = Date.now();
    let answers = false;
    const changes: boolean[] = [];
    const pool = new ReplicaPool(["http://a", "http://b"], {
      concurrency: 4,
      failureThreshold: 2,
      probeIntervalMs: 100,
      probeMaxMs: 400,
      probe: async (url) => {
        expect(url).toBe("http://a");
        probes.push(Date.now() - start);
        if (!answers) throw new Error("down");
      },
      onChange: (s) => changes.push(s.healthy),
    });
    const stale = await pool.acquire("ep"); // on a
    expect(stale.url).toBe("http://a");
    const leases = [await pool.acquire("ep"), await pool.acquire("ep")];
    for (const lease of leases) lease.release("failed");
    expect(pool.snapshot()[0].healthy).toBe(false);
    await vi.advanceTimersByTimeAsync(1100);
    expect(probes).toEqual([100, 300, 700, 1100]);
    answers = true;
    await vi.advanceTimersByTimeAsync(399);
    expect(pool.snapshot()[0].healthy).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(probes).toEqual([100, 300, 700, 1100, 1500]);
    expect(pool.snapshot()[0]).toMatchObject({ healthy: true, consecutiveFailures: 0 });
    expect(changes).toEqual([false, true]);
    // A lease taken before it went out does not count against it now.
    stale.release("failed");
    expect(pool.snapshot()[0]).toMatchObject({ healthy: true, consecutiveFailures: 0, inFlight: 0 });
    await vi.advanceTimersByTimeAsync(10_000);
    expect(probes).toHaveLength(5);
    pool.close();
  });

  it("says why a replica is out: what took it out, then what its last probe found; nothing once back", async () => {
    vi.useFakeTimers();
    let answer: Error | null = new Error("GET http://a/is_paused answered true outside a weight update");
    const pool = new ReplicaPool(["http://a", "http://b"], {
      concurrency: 4,
      failureThreshold: 2,
      probeIntervalMs: 100,
      probe: async () => {
        if (answer) throw answer;
      },
    });
    expect(pool.snapshot()[0].reason).toBeNull();
    pool.takeOutByURL("http://a", "failed to resume after a weight update: HTTP 500");
    expect(pool.snapshot()[0]).toMatchObject({
      healthy: false,
      reason: "failed to resume after a weight update: HTTP 500",
    });
    await vi.advanceTimersByTimeAsync(100);
    expect(pool.snapshot()[0].reason).toBe(
      "failed to resume after a weight update: HTTP 500; last probe: GET http://a/is_paused answered true outside a weight update",
    );
    answer = null;
    await vi.advanceTimersByTimeAsync(200);
    expect(pool.snapshot()[0]).toMatchObject({ healthy: true, reason: null });
    for (let i = 0; i < 2; i++) (await pool.acquire("ep")).release("failed");
    expect(pool.snapshot().filter((r) => !r.healthy)).toEqual([
      expect.objectContaining({ reason: "2 failed requests in a row" }),
    ]);
    pool.close();
  });

  it("counts a probe that never settles as failed once it times out", async () => {
    vi.useFakeTimers();
    let calls = 0;
    const aborted: unknown[] = [];
    const pool = new ReplicaPool(["http://a"], {
      concurrency: 1,
      failureThreshold: 1,
      probeIntervalMs: 100,
      probeTimeoutMs: 1000,
      probe: (_url, signal) => {
        calls++;
        signal.addEventListener("abort", () => aborted.push(signal.reason));
        // The first probe hangs and ignores its signal; the second answers.
        return calls === 1 ? new Promise<void>(() => {}) : Promise.resolve();
      },
    });
    (await pool.acquire(null)).release("failed");
    await vi.advanceTimersByTimeAsync(100);
    expect(calls).toBe(1);
    await vi.advanceTimersByTimeAsync(1000);
    expect(aborted).toHaveLength(1);
    expect(pool.anyHealthy).toBe(false);
    await vi.advanceTimersByTimeAsync(200);
    expect(calls).toBe(2);
    expect(pool.anyHealthy).toBe(true);
    pool.close();
  });

  it("holds waiters while every replica is out and serves them in order when one comes back", async () => {
    vi.useFakeTimers();
    const up = new Set<string>();
    const pool = new ReplicaPool(["http://a", "http://b"], {
      concurrency: 1,
      failureThreshold: 1,
      probeIntervalMs: 100,
      probeMaxMs: 100,
      probe: async (url) => {
        if (!up.has(url)) throw new Error("down");
      },
    });
    const a = await pool.acquire("ep");
    const b = await pool.acquire(null);
    const sticky = track(pool.acquire("ep")); // waits on a, which is full
    a.release("failed");
    b.release("failed");
    expect(pool.anyHealthy).toBe(false);
    const keyless = track(pool.acquire(null));
    await vi.advanceTimersByTimeAsync(5000);
    expect(sticky.settled()).toBe(false);
    expect(keyless.settled()).toBe(false);
    expect(pool.waiting).toBe(2);
    up.add("http://b");
    await vi.advanceTimersByTimeAsync(100);
    // Oldest first: the key's request (its replica is out) moves to b and sticks there.
    expect(sticky.value()?.url).toBe("http://b");
    expect(keyless.settled()).toBe(false);
    sticky.value()?.release("ok");
    await flush();
    expect(keyless.value()?.url).toBe("http://b");
    expect(pool.snapshot()[1].keys).toBe(1);
    pool.close();
  });
});

describe("abort and close", () => {
  it("an abort removes the waiter and its listener; a granted acquire leaves no listener", async () => {
    const pool = new ReplicaPool(["http://a"], { concurrency: 1, probe: alwaysUp });
    const controller = new AbortController();
    const immediate = await pool.acquire("ep", controller.signal);
    expect(getEventListeners(controller.signal, "abort")).toHaveLength(0);
    const pending = track(pool.acquire("ep", controller.signal));
    expect(getEventListeners(controller.signal, "abort")).toHaveLength(1);
    expect(pool.waiting).toBe(1);
    const reason = new Error("episode budget spent");
    controller.abort(reason);
    await flush();
    expect(pending.error()).toBe(reason);
    expect(pool.waiting).toBe(0);
    expect(getEventListeners(controller.signal, "abort")).toHaveLength(0);
    // The slot it waited for goes to the next acquire, not to the aborted one.
    const other = new AbortController();
    const next = track(pool.acquire(null, other.signal));
    immediate.release("ok");
    await flush();
    expect(next.value()?.url).toBe("http://a");
    expect(getEventListeners(other.signal, "abort")).toHaveLength(0);
    expect(pool.snapshot()[0].inFlight).toBe(1);
    pool.close();
  });

  it("rejects with the reason of a signal that already aborted", async () => {
    const pool = new ReplicaPool(["http://a"], { concurrency: 1, probe: alwaysUp });
    const reason = new Error("too late");
    await expect(pool.acquire(null, AbortSignal.abort(reason))).rejects.toBe(reason);
    expect(pool.snapshot()[0].requests).toBe(0);
    pool.close();
  });

  it("close rejects pending acquires, removes their listeners and stops probes", async () => {
    vi.useFakeTimers();
    let probes = 0;
    const pool = new ReplicaPool(["http://a", "http://b"], {
      concurrency: 1,
      failureThreshold: 1,
      probeIntervalMs: 100,
      probe: async () => {
        probes++;
        throw new Error("down");
      },
    });
    (await pool.acquire(null)).release("failed");
    const held = await pool.acquire("ep");
    const controller = new AbortController();
    const pending = [track(pool.acquire("ep", controller.signal)), track(pool.acquire(null))];
    await vi.advanceTimersByTimeAsync(100);
    expect(probes).toBe(1);
    pool.close();
    await flush();
    for (const p of pending) expect(p.error()).toBeInstanceOf(PoolClosedError);
    expect(getEventListeners(controller.signal, "abort")).toHaveLength(0);
    await expect(pool.acquire(null)).rejects.toBeInstanceOf(PoolClosedError);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(probes).toBe(1);
    expect(vi.getTimerCount()).toBe(0);
    held.release("ok");
    expect(pool.snapshot()[1].inFlight).toBe(0);
  });

  it("validates its options", () => {
    expect(() => new ReplicaPool([], { concurrency: 1, probe: alwaysUp })).toThrow(RangeError);
    expect(() => new ReplicaPool(["http://a", "http://a"], { concurrency: 1, probe: alwaysUp })).toThrow(
      RangeError,
    );
    expect(() => new ReplicaPool(["http://a"], { concurrency: 0, probe: alwaysUp })).toThrow(RangeError);
    expect(
      () => new ReplicaPool(["http://a"], { concurrency: 1, failureThreshold: 1.5, probe: alwaysUp }),
    ).toThrow(RangeError);
  });
});

describe("tryAcquire", () => {
  it("grants at once exactly where acquire would not wait: never past a queued acquire or over a limit", async () => {
    const pool = new ReplicaPool(URLS.slice(0, 2), { concurrency: 1, probe: alwaysUp });
    const first = pool.tryAcquire("k");
    expect(first?.url).toBe("http://a");
    // The key sticks to its replica, which is full: no lease elsewhere, acquire would wait too.
    expect(pool.tryAcquire("k")).toBeNull();
    const other = pool.tryAcquire(null);
    expect(other?.url).toBe("http://b");
    expect(pool.tryAcquire(null)).toBeNull();
    const queued = track(pool.acquire(null));
    other!.release("ok");
    await flush();
    // The slot went to the acquire that was waiting, not to a later tryAcquire.
    expect(queued.value()?.url).toBe("http://b");
    expect(pool.tryAcquire(null)).toBeNull();
    first!.release("ok");
    expect(pool.tryAcquire("k")?.url).toBe("http://a");
    expect(pool.snapshot().map((s) => [s.inFlight, s.requests, s.keys])).toEqual([
      [1, 2, 1],
      [1, 2, 0],
    ]);
    pool.close();
    expect(pool.tryAcquire(null)).toBeNull();
  });
});
