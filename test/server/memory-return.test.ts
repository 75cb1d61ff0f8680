// Memory given back after large releases (docs/server.md "Memory over time"): once releases
// add up to RETURN_AFTER_BYTES, one memory-reducing GC runs after a settling second, at most
// one per RETURN_EVERY_MS, and V8's pages that held the released memory leave the heap.
import { afterEach, describe, expect, it, vi } from "vitest";
import { MemoryReturn, RETURN_AFTER_BYTES, RETURN_EVERY_MS } from "../../src/server/memory-return.ts";

afterEach(() => {
  vi.useRealTimers();
});

describe("MemoryReturn", () => {
  it("runs one memory-reducing GC once releases pass the mark, and at most one per interval", () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "performance"] });
    const giveBack = new MemoryReturn();
    giveBack.released(RETURN_AFTER_BYTES - 1);
    vi.advanceTimersByTime(5_000);
    expect(giveBack.runs).toBe(0);
    giveBack.released(1);
    vi.advanceTimersByTime(999);
    expect(giveBack.runs).toBe(0);
    vi.advanceTimersByTime(1);
    expect(giveBack.runs).toBe(1);
    // Another large release right away waits for the interval.
    giveBack.released(RETURN_AFTER_BYTES);
    vi.advanceTimersByTime(RETURN_EVERY_MS - 1);
    expect(giveBack.runs).toBe(1);
    vi.advanceTimersByTime(1);
    expect(giveBack.runs).toBe(2);
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
    giveBack.released(RETURN_AFTER_BYTES);
    vi.advanceTimersByTime(1_000);
    expect(giveBack.runs).toBe(1);
    expect(process.memoryUsage().rss).toBeLessThan(full - (100 << 20));
  });
});
