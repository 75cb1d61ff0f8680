import { describe, expect, it } from "vitest";
import { type Departure, WaitQueue } from "../../src/concurrency/wait-queue.ts";

/** Parks each item and records the order callers leave in. */
function parkAll<T>(queue: WaitQueue<T>, items: T[], signals: (AbortSignal | undefined)[] = []) {
  const left: [T, Departure][] = [];
  const done = items.map((item, i) =>
    queue.park(item, signals[i]).then((how) => void left.push([item, how])),
  );
  return { left, settled: () => Promise.all(done) };
}

describe("WaitQueue", () => {
  it("wakes callers first in, first out", async () => {
    const queue = new WaitQueue<string>();
    const { left, settled } = parkAll(queue, ["a", "b", "c"]);
    expect(queue.size).toBe(3);
    expect(queue.peek()).toBe("a");
    expect(queue.wakeNext()).toBe("a");
    expect(queue.wakeNext()).toBe("b");
    expect(queue.wakeNext()).toBe("c");
    expect(queue.wakeNext()).toBeUndefined();
    await settled();
    expect(left).toEqual([
      ["a", "woken"],
      ["b", "woken"],
      ["c", "woken"],
    ]);
    expect(queue.size).toBe(0);
  });

  it("lets an aborted caller leave from the middle without disturbing the order", async () => {
    const queue = new WaitQueue<number>();
    const middle = new AbortController();
    const { left, settled } = parkAll(queue, [1, 2, 3], [undefined, middle.signal, undefined]);
    middle.abort();
    await Promise.resolve();
    expect([...queue]).toEqual([1, 3]);
    expect(queue.size).toBe(2);
    queue.wakeAll();
    await settled();
    expect(left).toEqual([
      [2, "aborted"],
      [1, "woken"],
      [3, "woken"],
    ]);
  });

  it("answers at once for a signal already aborted, and an abort after waking changes nothing", async () => {
    const queue = new WaitQueue<number>();
    const gone = new AbortController();
    gone.abort();
    expect(await queue.park(1, gone.signal)).toBe("aborted");
    expect(queue.size).toBe(0);
    const late = new AbortController();
    const parked = queue.park(2, late.signal);
    queue.wakeNext();
    late.abort();
    expect(await parked).toBe("woken");
    expect(queue.size).toBe(0);
    // The list is still whole: a later caller parks and wakes.
    const next = queue.park(3);
    expect(queue.wakeNext()).toBe(3);
    expect(await next).toBe("woken");
  });

  it("wakes by a rule asked in arrival order, which may charge what it admits", async () => {
    const queue = new WaitQueue<number>();
    const { left, settled } = parkAll(queue, [5, 2, 4, 1]);
    let room = 8;
    const woken = queue.wakeWhere((size) => {
      if (size > room) return false;
      room -= size;
      return true;
    });
    expect(woken).toBe(3);
    expect([...queue]).toEqual([4]);
    queue.close();
    await settled();
    expect(left).toEqual([
      [5, "woken"],
      [2, "woken"],
      [1, "woken"],
      [4, "closed"],
    ]);
  });

  it("keeps enqueued tasks in line with parked callers and hands them out in order", async () => {
    const queue = new WaitQueue<string>();
    queue.enqueue("a");
    const parked = queue.park("b");
    queue.enqueue("c");
    expect(queue.size).toBe(3);
    expect(queue.peek()).toBe("a");
    expect([queue.wakeNext(), queue.wakeNext(), queue.wakeNext()]).toEqual(["a", "b", "c"]);
    expect(await parked).toBe("woken");
    // A handle asked for its departure only after it left still answers how.
    const late = queue.enter("d");
    queue.close();
    expect(await late.departure).toBe("closed");
  });

  it("parks until a condition holds, asking again on each wake, and gives up on abort or close", async () => {
    const queue = new WaitQueue();
    let count = 0;
    const reached = queue.until(() => count >= 2);
    for (let i = 0; i < 2; i++) {
      count++;
      queue.wakeAll();
      await Promise.resolve();
    }
    expect(await reached).toBe(true);
    const stop = new AbortController();
    const aborted = queue.until(() => false, stop.signal);
    stop.abort();
    expect(await aborted).toBe(false);
    const closed = queue.until(() => false);
    queue.close();
    expect(await closed).toBe(false);
    expect(queue.size).toBe(0);
  });

  it("dismisses everyone on close and refuses callers after it", async () => {
    const queue = new WaitQueue();
    const first = queue.park(undefined);
    queue.close();
    expect(await first).toBe("closed");
    expect(await queue.park(undefined)).toBe("closed");
    expect(queue.closed).toBe(true);
    expect(queue.size).toBe(0);
  });

  it("keeps no listener on a signal once its caller has left", async () => {
    const queue = new WaitQueue();
    const controller = new AbortController();
    let listeners = 0;
    const signal = controller.signal;
    const add = signal.addEventListener.bind(signal);
    const remove = signal.removeEventListener.bind(signal);
    signal.addEventListener = ((...args: Parameters<typeof add>) => {
      listeners++;
      add(...args);
    }) as typeof signal.addEventListener;
    signal.removeEventListener = ((...args: Parameters<typeof remove>) => {
      listeners--;
      remove(...args);
    }) as typeof signal.removeEventListener;
    for (let i = 0; i < 100; i++) {
      const parked = queue.park(undefined, signal);
      queue.wakeNext();
      await parked;
    }
    expect(listeners).toBe(0);
  });

  it("wakes a caller by its handle, which says where it waits until it leaves", async () => {
    const queue = new WaitQueue<string>();
    const a = queue.enter("a");
    const b = queue.enter("b");
    expect(queue.first()).toBe(a);
    expect(b.queue).toBe(queue);
    expect(queue.wakeParked(b)).toBe(true);
    expect(b.queue).toBeNull();
    expect(queue.wakeParked(b)).toBe(false);
    expect(await b.departure).toBe("woken");
    expect([...queue]).toEqual(["a"]);
    expect(a.arrival).toBeLessThan(b.arrival);
  });

  it("moves a caller to another queue in its place by arrival, its signal with it", async () => {
    const one = new WaitQueue<string>();
    const two = new WaitQueue<string>();
    const gone = new AbortController();
    const a = one.enter("a", gone.signal);
    two.enter("b");
    const c = one.enter("c");
    two.enter("d");
    expect(two.take(c)).toBe(true);
    expect(two.take(a)).toBe(true);
    expect(two.take(a)).toBe(false);
    expect([...two]).toEqual(["a", "b", "c", "d"]);
    expect(one.size).toBe(0);
    expect(two.size).toBe(4);
    expect(a.queue).toBe(two);
    gone.abort();
    expect(await a.departure).toBe("aborted");
    expect([...two]).toEqual(["b", "c", "d"]);
    expect(two.size).toBe(3);
    expect(one.wakeNext()).toBeUndefined();
  });

  it("merges every caller of a queue into another by arrival, and dismisses them into a closed one", async () => {
    const one = new WaitQueue<number>();
    const two = new WaitQueue<number>();
    const handles = [1, 2, 3, 4, 5, 6].map((n) => (n % 2 === 0 ? two : one).enter(n));
    expect(two.takeAll(one)).toBe(3);
    expect([...two]).toEqual([1, 2, 3, 4, 5, 6]);
    expect(one.size).toBe(0);
    expect(two.size).toBe(6);
    expect(two.wakeNext()).toBe(1);
    const closed = new WaitQueue<number>();
    closed.close();
    expect(closed.take(handles[1])).toBe(true);
    expect(await handles[1].departure).toBe("closed");
    expect(closed.takeAll(two)).toBe(4);
    expect(await Promise.all(handles.slice(2).map((h) => h.departure))).toEqual(Array(4).fill("closed"));
    expect(two.size).toBe(0);
    expect(closed.size).toBe(0);
  });
});
