// `rollgym envs check` over the wire: the conformance checks on remote tags (env_type openenv).
// rollgym's own CoordSokoban served over /openenv and the Python GuessNumber pass (snapshots are
// not on the wire, so that check says it was skipped); a server that steps after done, or whose
// reset ignores the seed, is caught. The command line runs it on a tag from key=value overrides.
import type { ChildProcess } from "node:child_process";
import { afterEach, describe, expect, it } from "vitest";
import { checkConformance } from "../../envs/conformance.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { jsonLines, ROOT, rollgym } from "../helpers/cli.ts";
import { FakeOpenEnv, remoteRegistry, startPythonProvider } from "../helpers/openenv-remote.ts";

const stops: (() => unknown)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0)) await stop();
});

async function rollgymServing(): Promise<string> {
  const server: RollgymServer = await buildServer({});
  stops.push(() => server.shutdown());
  return `${await server.listen()}/openenv/CoordSokoban`;
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
      "finished episodes refuse another step",
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

  it("catches a server that steps after done and one whose reset ignores the seed", async () => {
    const walk = await FakeOpenEnv.start({ kind: "none" });
    const noSeed = await FakeOpenEnv.start({ kind: "no_seed" });
    stops.push(
      () => walk.stop(),
      () => noSeed.stop(),
    );
    const registry = await remoteRegistry("Walk", "CoordSokoban", { url: walk.base, max_sessions: 4 });
    const checks = await checkConformance(registry.tag("Walk"));
    expect(failedChecks(checks)).toEqual(["steps after done are refused"]);
    expect(checks.at(-1)!.detail).toMatch(/^seed \d+: step after done changed the state$/);

    const unseeded = await remoteRegistry("NoSeed", "CoordSokoban", { url: noSeed.base, check_seed: false });
    expect(failedChecks(await checkConformance(unseeded.tag("NoSeed")))).toContain("same seed, same episode");
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
