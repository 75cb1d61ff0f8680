import { describe, expect, it } from "vitest";
import { rssBound } from "../../src/bench/memory-bound.ts";

const MIB = 2 ** 20;

describe("rssBound", () => {
  it("adds a line for the engine requests in flight, 20 KiB each", () => {
    const shape = { episodes: 1024, groupSize: 8, clients: 1, bufferedGroups: 64 };
    const without = rssBound({ ...shape, engineRequests: 0 });
    const withRequests = rssBound({ ...shape, engineRequests: 10_240 });
    expect(withRequests.bytes - without.bytes).toBe(10_240 * 20 * 1024);
    expect(withRequests.derivation).toContain("200 (10240 engine requests in flight × 20 KiB)");
    expect(withRequests.derivation).toContain(`= ${Number((withRequests.bytes / MIB).toFixed(1))} MiB`);
  });
});
