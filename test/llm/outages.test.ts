// Engine outages and many replicas: a rollout rides out a minute-long engine outage (resets,
// then a restart on the same port), and spreads over three replicas, one of which is killed
// mid-run, without moving any episode between replicas that stayed healthy.
import { describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import { defaultConfig } from "../../src/config/index.ts";
import { ChatPolicy } from "../../src/llm/openai-chat.ts";
import { type MockEngine, startMockEngine } from "../../src/mock-engine/server.ts";
import { type BatchRequest, runBatch } from "../../src/rollout/batch.ts";
import { resolveRequest } from "../../src/rollout/request.ts";

const registry = createRegistry();

function batch(groups: number, groupSize: number): BatchRequest {
  const config = defaultConfig();
  config.es_manager.train = {
    env_groups: groups,
    group_size: groupSize,
    env_configs: { tags: ["SimpleSokoban"], n_groups: [groups] },
  };
  const request = resolveRequest(config);
  return { ...request, sampling: { ...request.sampling, max_tokens: 64 } };
}

describe("outages", () => {
  it("a 64×16 rollout rides out 60 s of engine outage (30 s of resets, 30 s refused); none fails", async () => {
    let engine: MockEngine = await startMockEngine({ model: "mock", seed: 2, ttftMs: 2 });
    const port = engine.port;
    const policy = new ChatPolicy({ baseURL: engine.url, model: "mock", concurrency: 128 });
    await policy.preflight();
    let turns = 0;
    let outage: Promise<void> | null = null;
    const served: number[] = [];
    const outageDone = () => outage ?? Promise.resolve();
    const result = await runBatch(registry, batch(64, 16), policy, {
      onTurn: () => {
        turns++;
        if (turns === 1500 && outage === null) {
          outage = (async () => {
            engine.setOutage("reset");
            await new Promise((resolve) => setTimeout(resolve, 30_000));
            served.push(engine.stats().completed);
            await engine.close(); // refused from here on
            await new Promise((resolve) => setTimeout(resolve, 30_000));
            engine = await startMockEngine({ model: "mock", seed: 2, ttftMs: 2, port });
          })();
        }
      },
    });
    await outageDone();
    await policy.close();
    await engine.close();
    expect(outage).not.toBeNull();
    expect(result.failed).toBe(0);
    expect(result.episodes).toHaveLength(1024);
    expect(result.episodes.every((e) => e.end_reason !== "failed")).toBe(true);
    // Turns went on after the restart, on the new engine.
    expect(engine.stats().completed).toBeGreaterThan(0);
    expect(policy.stats.retries).toBeGreaterThan(0);
  }, 240_000);
});

describe("many replicas", () => {
  // Replica 0 is also the one preflight asked first; token counts must not depend on it.
  // closeGraceMs 0: the killed replica stops answering at once (a draining one still answers probes).
  for (const dead of [2, 0]) {
    it(`spreads ≥ 2,000 requests over three replicas, replica ${dead} killed mid-run; episodes stay on healthy replicas`, async () => {
      const engines = await Promise.all(
        [1, 2, 3].map((seed) => startMockEngine({ model: "mock", seed, ttftMs: 3, closeGraceMs: 0 })),
      );
      const urls = engines.map((e) => e.url);
      const alive = urls.filter((_, i) => i !== dead);
      const routes = new Map<string, string[]>();
      const policy = new ChatPolicy({
        baseURL: urls,
        model: "mock",
        concurrency: 64,
        onServed: (affinity, url) => {
          const list = routes.get(affinity!) ?? [];
          list.push(url);
          routes.set(affinity!, list);
        },
      });
      await policy.preflight();
      let turns = 0;
      let killed: Promise<void> | null = null;
      const result = await runBatch(registry, batch(48, 16), policy, {
        onTurn: () => {
          if (++turns === 300) killed = engines[dead].close();
        },
      });
      await killed;
      await policy.close();
      for (const [i, e] of engines.entries()) if (i !== dead) await e.close();

      expect(result.failed).toBe(0);
      const total = [...policy.served.values()].reduce((n, c) => n + c, 0);
      expect(total).toBeGreaterThanOrEqual(2000);
      const [a, b] = alive.map((url) => policy.served.get(url)!);
      expect(Math.abs(a - b) / Math.max(a, b)).toBeLessThan(0.1);
      expect(policy.served.get(urls[dead])).toBeGreaterThan(0);
      expect(policy.replicas().find((r) => r.url === urls[dead])?.healthy).toBe(false);
      // An episode's turns change replica only when its replica was the one killed.
      let moved = 0;
      for (const list of routes.values()) {
        for (let i = 1; i < list.length; i++) {
          if (list[i] === list[i - 1]) continue;
          expect(list[i - 1]).toBe(urls[dead]);
          moved++;
        }
      }
      expect(moved).toBeGreaterThan(0);
    }, 240_000);
  }
});
