// `rollgym rollout --json` reports how long the rollout took and how many requests it made.
import { afterAll, describe, expect, it } from "vitest";
import { type Child, startRollgym } from "../../src/bench/children.ts";
import { runInProcess } from "../cli/in-process.ts";

interface Summary {
  episodes: number;
  failed: number;
  turns: number;
  timing: { seconds: number; episodes_per_s: number; turns_per_s: number };
  requests?: { sent: number; retries: number; failures: number };
}

describe("rollout --json timing and request counts", () => {
  const children: Child[] = [];
  afterAll(async () => {
    for (const c of children) await c.stop();
  });

  it("a built-in policy: wall time, rates and turns; no engine request counts", async () => {
    const r = await runInProcess(["rollout", "--tag", "SimpleSokoban", "--groups", "2", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const s = JSON.parse(r.stdout) as Summary;
    expect(s.episodes).toBe(32);
    expect(s.turns).toBeGreaterThanOrEqual(s.episodes);
    expect(s.timing.seconds).toBeGreaterThan(0);
    expect(s.timing.episodes_per_s).toBeCloseTo(s.episodes / s.timing.seconds, 0);
    expect(s.timing.turns_per_s).toBeCloseTo(s.turns / s.timing.seconds, 0);
    expect(s.requests).toBeUndefined();
  });

  it("an engine: HTTP requests sent, retries and failures next to the turns", async () => {
    const engine = await startRollgym(
      "mock engine",
      ["mock-engine", "--port", "0", "--model", "m", "--error-rate", "0.2", "--retry-after-s", "0"],
      /mock engine listening on (\S+)/,
    );
    children.push(engine);
    const r = await runInProcess([
      "rollout",
      "--llm",
      engine.url,
      "--model",
      "m",
      "--tag",
      "SimpleSokoban",
      "--groups",
      "2",
      "--group-size",
      "4",
      "--json",
    ]);
    expect(r.code, r.stderr).toBe(0);
    const s = JSON.parse(r.stdout) as Summary;
    expect(s.failed).toBe(0);
    expect(s.requests).toBeDefined();
    // Every turn took one answered request; the injected errors took more, each one a retry.
    expect(s.requests!.sent).toBe(s.turns + s.requests!.retries);
    expect(s.requests!.retries).toBeGreaterThan(0);
    expect(s.timing.seconds).toBeGreaterThan(0);
  });
});
