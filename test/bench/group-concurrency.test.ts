// `rollgym serve --group-concurrency N` (rollgym.limits.group_concurrency): how many groups of
// one rollout the server plays at once, seen from the engine as requests running together.
import { afterEach, describe, expect, it } from "vitest";
import { type Child, startRollgym } from "../../src/bench/children.ts";
import { TrainerClient } from "../../src/bench/trainer.ts";
import { type MockEngine, startMockEngine } from "../../src/mock-engine/server.ts";
import { runInProcess } from "../cli/in-process.ts";
import { expectUsageError } from "../helpers/cli.ts";

describe("serve --group-concurrency", () => {
  let engine: MockEngine | null = null;
  let server: Child | null = null;
  afterEach(async () => {
    await server?.stop();
    await engine?.close();
  });

  async function peakRunning(serveArgs: string[]): Promise<number> {
    // A slow first token, so the requests of every playing group overlap at the engine.
    engine = await startMockEngine({ port: 0, model: "m", ttftMs: 150 });
    server = await startRollgym(
      "rollgym serve",
      ["serve", "--port", "0", "--llm", engine.url, "--model", "m", ...serveArgs],
      /rollgym serving on (\S+)/,
    );
    const trainer = await TrainerClient.connect(server.url, { credit: 100 });
    const result = await trainer.rollout({
      id: "r",
      tag: "SimpleSokoban",
      groups: 6,
      groupSize: 4,
      seed: 1,
      maxTurn: 1,
      maxTokens: 8,
    });
    trainer.close();
    expect({ ...result, sent: [...result.sent].sort((a, b) => a - b) }).toEqual({
      episodes: 24,
      failed: 0,
      sent: [0, 1, 2, 3, 4, 5],
    });
    return engine.stats().peakRunning;
  }

  it("plays at most N groups of a rollout at once", async () => {
    expect(await peakRunning(["--group-concurrency", "2"])).toBe(2 * 4);
  });

  it("takes the config key rollgym.limits.group_concurrency too", async () => {
    expect(await peakRunning(["rollgym.limits.group_concurrency=3"])).toBe(3 * 4);
  });

  it("the default (64) plays all six groups together", async () => {
    expect(await peakRunning([])).toBe(6 * 4);
  });

  it.each(["0", "x"])("refuses --group-concurrency %s, naming the key", async (value) => {
    expectUsageError(await runInProcess(["serve", "--group-concurrency", value]), [
      "rollgym.limits.group_concurrency",
    ]);
  });
});
