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

  it("adds a line for token logs in token mode: every held episode with the longest log, 128 B per id", () => {
    const shape = { episodes: 1024, groupSize: 8, clients: 1, bufferedGroups: 256, engineRequests: 1024 };
    const chat = rssBound({ ...shape, tokenLogIds: null });
    expect(rssBound(shape)).toEqual(chat);
    const tokens = rssBound({ ...shape, tokenLogIds: 700 });
    // 1,024 in flight + 256 buffered groups of 8.
    expect(tokens.bytes - chat.bytes).toBe(3072 * 700 * 128);
    expect(tokens.derivation).toContain("262.5 (3072 episodes held × token logs of 700 ids × 128 B)");
    expect(chat.derivation).not.toContain("token logs");
  });
});
