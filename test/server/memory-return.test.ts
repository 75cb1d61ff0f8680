// Memory given back after large releases (docs/server.md "Memory over time"): once what is held
// has fallen RETURN_AFTER_BYTES below its peak, one memory-reducing GC runs after a settling
// second, at most one per RETURN_EVERY_MS, and V8's pages that held the released memory leave
// the heap. Releases matched by new charges (a busy server's churn) run none.
import { afterEach, describe, expect, it, vi } from "vitest";
import { MemoryReturn, RETURN_AFTER_BYTES, RETURN_EVERY_MS } from "../../src/server/memory-return.ts";

afterEach(() => {
  vi.useRealTimers();
});

describe("MemoryReturn", () => {
  it("runs one memory-reducing GC once what is held falls past the mark, and at most one per interval", () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "performance"] });
    const giveBack = new MemoryReturn();
    giveBack.held(RETURN_AFTER_BYTES);
    giveBack.held(1);
    vi.advanceTimersByTime(5_000);
    expect(giveBack.runs).toBe(0);
    giveBack.held(0);
    vi.advanceTimersByTime(999);
    expect(giveBack.runs).toBe(0);
    vi.advanceTimersByTime(1);
    expect(giveBack.runs).toBe(1);
    // Another large fall right away waits for the interval.
    giveBack.held(2 * RETURN_AFTER_BYTES);
    giveBack.held(RETURN_AFTER_BYTES);
    vi.advanceTimersByTime(RETURN_EVERY_MS - 1);
    expect(giveBack.runs).toBe(1);
    vi.advanceTimersByTime(1);
    expect(giveBack.runs).toBe(2);
    giveBack.stop();
  });

  it("runs none while releases are matched by new charges, however much is released", () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "performance"] });
    const giveBack = new MemoryReturn();
    // A busy server: groups of 8 MiB acknowledged and new ones charged, 100 times the mark in all.
    const base = 3 * RETURN_AFTER_BYTES;
    for (let i = 0; i < 800; i++) {
      giveBack.held(base + (8 << 20));
      giveBack.held(base);
      vi.advanceTimersByTime(100);
    }
    expect(giveBack.runs).toBe(0);
    // Then the load ends: what was held is given back, and one GC runs.
    giveBack.held(0);
    vi.advanceTimersByTime(1_000);
    expect(giveBack.runs).toBe(1);
    giveBack.stop();
  });

  it("gives the pages of released objects back: RSS shrinks", () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "performance"] });
    // 200 MiB of objects (not strings: their pages are ordinary heap pages), then dropped.
    let held: number[][] | null = Array.from({ length: 200 }, () => new Array<number>(128 * 1024).fill(1.5));
    const full = process.memoryUsage().rss;
    held = null;
    expect(held).toBeNull();
    const giveBack = new MemoryReturn();
    giveBack.held(RETURN_AFTER_BYTES);
    giveBack.held(0);
    vi.advanceTimersByTime(1_000);
    expect(giveBack.runs).toBe(1);
    expect(process.memoryUsage().rss).toBeLessThan(full - (100 << 20));
  });
});
