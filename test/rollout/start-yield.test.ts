// A rollout builds each group (its env resets, synchronous and milliseconds each for Sokoban)
// before asking for any answer. When many rollouts start at once (200 clients' rollout frames
// in one poll), those builds must share the event loop in slices like answers do, or /healthz
// and every other client wait for all of them. Counted in event-loop turns, never in time.
import { describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import type { Policy } from "../../src/llm/policy.ts";
import { SLICE } from "../../src/llm/slices.ts";
import { runBatch } from "../../src/rollout/batch.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";
import { loopTurns } from "../helpers/loop-turns.ts";

const registry = createRegistry();

describe("many rollouts starting at once", () => {
  it(`build their groups with a turn of the event loop at least every ${SLICE.turns} groups`, async () => {
    const [rollouts, groups, groupSize] = [64, 16, 4];
    const episodes = rollouts * groups * groupSize;
    let asked = 0;
    let allAsked: () => void = () => {};
    const built = new Promise<void>((resolve) => {
      allAsked = resolve;
    });
    // Every episode asks once its group is built; the answer never comes before the abort.
    const policy: Policy = {
      name: "waits",
      generate: (request) => {
        if (++asked === episodes) allAsked();
        return new Promise((_, reject) =>
          request.signal?.addEventListener("abort", () => reject(request.signal?.reason), { once: true }),
        );
      },
    };
    const stop = new AbortController();
    const loop = loopTurns();
    const batches = Array.from({ length: rollouts }, (_, r) =>
      runBatch(
        registry,
        defaultBatchRequest("val", { seed: 1000 * r, tags: [{ tag: "SimpleSokoban", groups }], groupSize }),
        policy,
        { signal: stop.signal },
      ),
    );
    await built;
    const turns = loop.stop();
    stop.abort(new Error("test over"));
    await Promise.allSettled(batches);
    expect(turns).toBeGreaterThanOrEqual(Math.floor((rollouts * groups) / SLICE.turns) - 1);
  }, 120_000);
});
