// `rollgym envs check` over the wire: the conformance checks on remote tags (env_type openenv).
// rollgym's own CoordSokoban served over /openenv and the Python GuessNumber pass (snapshots are
// not on the wire, so that check says it was skipped). A server that steps on after done passes,
// as OpenEnv's own envs do; one whose reset ignores the seed is caught, even when its first
// observation is fixed. The command line runs it, and `envs prompt`, on a tag from key=value
// overrides.
import type { ChildProcess } from "node:child_process";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { WebSocketServer } from "ws";
import { checkConformance } from "../../envs/conformance.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { jsonLines, ROOT, rollgym } from "../helpers/cli.ts";
import { addRemoteTag, FakeOpenEnv, remoteRegistry, startPythonProvider } from "../helpers/openenv-remote.ts";

const stops: (() => unknown)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0)) await stop();
});

async function rollgymServing(): Promise<string> {
  const server: RollgymServer = await buildServer({});
  stops.push(() => server.shutdown());
  return `${await server.listen()}/openenv/CoordSokoban`;
}

/**
 * A free-text guessing game on OpenEnv's wire: reset always shows the same text, a guess gets
 * "N: higher" or "N: lower" until it names `secret(seed)`. Steps after done step on.
 */
async function guessServer(secret: (seed: number) => number): Promise<string> {
  const wss = new WebSocketServer({ host: "127.0.0.1", port: 0 });
  await new Promise((resolve) => wss.once("listening", resolve));
  stops.push(() => {
    for (const ws of wss.clients) ws.terminate();
    return new Promise((resolve) => wss.close(resolve));
  });
  wss.on("connection", (ws) => {
    let target = 0;
    ws.on("message", (raw) => {
      const message = JSON.parse(raw.toString()) as { type: string; data?: Record<string, unknown> };
      if (message.type === "close") return ws.close(1000);
      let text = "Guess a number between 1 and 100.";
      let done = false;
      if (message.type === "reset") target = secret(Number(message.data?.seed ?? 0));
      else {
        const guess = Number(message.data?.action);
        done = guess === target;
        text = done ? `${guess}: right` : `${guess}: ${guess < target ? "higher" : "lower"}`;
      }
      const observation = { text, actions: null };
      const reward = message.type === "reset" ? null : done ? 1 : 0;
      ws.send(JSON.stringify({ type: "observation", data: { observation, reward, done } }));
    });
  });
  return `http://127.0.0.1:${(wss.address() as AddressInfo).port}`;
}

const failedChecks = (checks: { name: string; ok: boolean }[]) =>
  checks.filter((c) => !c.ok).map((c) => c.name);

describe("conformance of remote tags", () => {
  it("rollgym's CoordSokoban over /openenv passes every check; snapshots are skipped", async () => {
    const registry = await remoteRegistry("RemoteSokoban", "CoordSokoban", { url: await rollgymServing() });
    const checks = await checkConformance(registry.tag("RemoteSokoban"));
    expect(failedChecks(checks)).toEqual([]);
    expect(checks.find((c) => c.name === "snapshot survives encode/decode")?.detail).toBe(
      "skipped: the env declares no snapshot/restore",
    );
    expect(checks.find((c) => c.name === "steps after done are refused")?.detail).toBe(
      "finished episodes refuse another step (rollgym's, before the server; OpenEnv servers may step on)",
    );
  });

  it("the Python GuessNumber (free-text actions) passes", { timeout: 60_000 }, async () => {
    const { child, base } = await startPythonProvider(ROOT, [
      "python/examples/guess_number_env.py",
      "--port",
      "0",
    ]);
    stops.push(() => (child as ChildProcess).kill("SIGKILL"));
    const registry = await remoteRegistry("GuessNumber", "CoordSokoban", { url: base, max_sessions: 4 });
    expect(failedChecks(await checkConformance(registry.tag("GuessNumber")))).toEqual([]);
  });

  it("passes a server that steps on after done, as OpenEnv's own envs do; catches one whose reset ignores the seed", async () => {
    const walk = await FakeOpenEnv.start({ kind: "none" });
    const noSeed = await FakeOpenEnv.start({ kind: "no_seed" });
    stops.push(
      () => walk.stop(),
      () => noSeed.stop(),
    );
    const registry = await remoteRegistry("Walk", "CoordSokoban", { url: walk.base, max_sessions: 4 });
    expect(failedChecks(await checkConformance(registry.tag("Walk")))).toEqual([]);

    const unseeded = await remoteRegistry("NoSeed", "CoordSokoban", { url: noSeed.base, check_seed: false });
    expect(failedChecks(await checkConformance(unseeded.tag("NoSeed")))).toContain("same seed, same episode");
  });

  it("catches a guessing game whose fixed first observation hides that its secret ignores the seed", async () => {
    const fixed = await guessServer(() => 42);
    const seeded = await guessServer((seed) => (seed % 100) + 1);
    const config = { check_seed: false, max_sessions: 4 };
    const registry = await remoteRegistry("Fixed", "CoordSokoban", { url: fixed, ...config });
    addRemoteTag(registry, "Seeded", "CoordSokoban", { url: seeded, ...config });
    const checks = await checkConformance(registry.tag("Fixed"));
    expect(failedChecks(checks)).toEqual(["seeds matter"]);
    expect(checks.find((c) => c.name === "seeds matter")?.detail).toMatch(
      /^seeds 0, 1, 123, 10000, \d+ gave the same episode for the same 30 actions: the env ignores the seed$/,
    );
    expect(failedChecks(await checkConformance(registry.tag("Seeded")))).toEqual([]);
  });

  it("rollgym envs check runs on a remote tag given as custom_envs overrides", {
    timeout: 60_000,
  }, async () => {
    const base = await rollgymServing();
    const tag = "custom_envs.RemoteSokoban";
    const overrides = [
      `${tag}.env_type=openenv`,
      `${tag}.max_actions_per_traj=10`,
      `${tag}.env_instruction=Push the boxes.`,
      `${tag}.max_tokens=100`,
      `${tag}.env_config.url=${base}`,
    ];
    const result = await rollgym(["envs", "check", "RemoteSokoban", ...overrides]);
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    expect(jsonLines(result.stdout)[0]).toMatchObject({ tag: "RemoteSokoban", ok: true });
    // envs prompt reads the first observation from the server: the same state as in process.
    const prompt = await rollgym(["envs", "prompt", "RemoteSokoban", "--seed", "5", ...overrides]);
    expect(prompt.stderr).toBe("");
    expect(prompt.code).toBe(0);
    const local = await rollgym(["envs", "prompt", "CoordSokoban", "--seed", "5"]);
    const state = (out: string) =>
      /State:\n([\s\S]*)\nYou have/.exec(
        (jsonLines(out)[0] as { messages: { content: string }[] }).messages[1].content,
      )?.[1];
    expect(state(prompt.stdout)).toContain("Board size:");
    expect(state(prompt.stdout)).toBe(state(local.stdout));
    // Commands that step in process refuse the tag, saying why.
    const play = await rollgym([
      "envs",
      "play",
      "RemoteSokoban",
      "--seed",
      "1",
      "--actions",
      "Up",
      ...overrides,
    ]);
    expect(play.code).toBe(2);
    expect(play.stderr).toContain(
      "RemoteSokoban runs in another process (env_type openenv), and envs play steps envs in process",
    );
  });
});
