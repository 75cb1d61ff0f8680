// rollgym hosting a Python OpenEnv environment: python/examples/guess_number_env.py,
// served by rollgym_envs' worker pool, rolled out in groups by rollgym as env_type openenv with
// free-text actions. Every episode equals the same env run in process in Python, seed for seed:
// the same observations turn by turn, rewards, and end.

import type { ChildProcess } from "node:child_process";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { afterEach, expect, it } from "vitest";
import { WebSocket } from "ws";
import { runBatch } from "../../src/rollout/batch.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";
import { ROOT } from "../helpers/cli.ts";
import { bisectPolicy, pythonPath, remoteRegistry, startPythonProvider } from "../helpers/openenv-remote.ts";

let child: ChildProcess | null = null;
afterEach(() => {
  child?.kill("SIGKILL");
  child = null;
});

/** GuessNumber played in process in Python: each episode's first observation and steps. */
async function inProcess(episodes: { seed: number; actions: string[] }[]) {
  const script = [
    "import json, sys",
    "from guess_number_env import GuessNumber",
    "out = []",
    "for e in json.load(sys.stdin):",
    "    env = GuessNumber()",
    "    first = env.reset(e['seed'])",
    "    out.append({'first': first, 'steps': [list(env.step(a))[:3] for a in e['actions']]})",
    "print(json.dumps(out))",
  ].join("\n");
  const run = promisify(execFile);
  const pending = run("/usr/bin/python3", ["-c", script], {
    env: { ...process.env, PYTHONPATH: pythonPath(ROOT), PYTHONDONTWRITEBYTECODE: "1" },
  });
  pending.child.stdin!.end(JSON.stringify(episodes));
  const { stdout } = await pending;
  return JSON.parse(stdout) as { first: string; steps: [string, number, boolean][] }[];
}

/** guess_number_env.py served on a free port with its default limits. */
async function startGuessNumber(): Promise<string> {
  const started = await startPythonProvider(ROOT, [
    "python/examples/guess_number_env.py",
    "--port",
    "0",
    "--workers",
    "2",
  ]);
  child = started.child;
  return started.base;
}

/** 4 groups × 3 GuessNumber episodes from `base`, bisected; `envConfig` adds to the tag's env_config. */
async function rollOut(base: string, envConfig: Record<string, unknown> = {}) {
  const registry = await remoteRegistry(
    "GuessNumber",
    "CoordSokoban",
    { url: base, max_sessions: 8, ...envConfig },
    { max_actions_per_traj: 7, env_instruction: "Guess the number. Answer like <answer>50</answer>.\n" },
  );
  const defaults = defaultBatchRequest("train");
  const request = defaultBatchRequest("train", {
    tags: [{ tag: "GuessNumber", groups: 4 }],
    groupSize: 3,
    seed: 900,
    episode: { ...defaults.episode, max_turn: 8, max_actions_per_turn: 1 },
  });
  return runBatch(registry, request, bisectPolicy());
}

it("rolls out GuessNumber from a Python OpenEnv server equal to the env in process", {
  timeout: 120_000,
}, async () => {
  const result = await rollOut(await startGuessNumber());
  expect(result.failed).toBe(0);
  expect(result.episodes).toHaveLength(12);

  const python = await inProcess(
    result.episodes.map((e) => ({ seed: e.seed, actions: e.turns.flatMap((t) => t.actions) })),
  );
  result.episodes.forEach((episode, i) => {
    const { first, steps } = python[i];
    expect(episode.turns[0].state).toBe(first);
    // One action a turn: each turn's reward, and the next turn's state, is that step's.
    expect(episode.turns.map((t) => t.reward)).toEqual(steps.map((s) => s[1]));
    expect([...episode.turns.slice(1).map((t) => t.state), episode.final_state]).toEqual(
      steps.map((s) => s[0]),
    );
    expect(episode.terminated).toBe(steps.at(-1)![2] || episode.end_reason === "action_budget");
  });
  // Groups share a seed; the bisection finds most numbers, the "banana" turns cost -0.1.
  expect(new Set(result.episodes.map((e) => e.seed))).toEqual(new Set([900, 901, 902, 903]));
  expect(result.episodes.filter((e) => e.success).length).toBeGreaterThan(6);
  expect(result.episodes.some((e) => e.turns[0].reward === -0.1)).toBe(true);
});

// Issue 28.5: sockets that never send anything held every max_sessions place (256 by default),
// so rollgym's own episodes got CAPACITY_REACHED until they gave up. A socket now takes a place
// at its first reset; silent ones are closed after hello_timeout_s (10 s by default, longer
// than the 3 s the episodes here wait out a full server).
it("256 silent sockets on the provider do not keep rollgym's episodes out", {
  timeout: 120_000,
}, async () => {
  const base = await startGuessNumber();
  const silent = await Promise.all(
    Array.from(
      { length: 256 },
      () =>
        new Promise<WebSocket>((resolve, reject) => {
          const ws = new WebSocket(`${base.replace(/^http/, "ws")}/ws`, { perMessageDeflate: false });
          ws.once("open", () => resolve(ws));
          ws.once("error", reject);
        }),
    ),
  );
  try {
    const result = await rollOut(base, { capacity_wait_s: 3 });
    expect(result.failed, JSON.stringify(result.episodes.find((e) => e.failure)?.failure)).toBe(0);
    expect(result.episodes).toHaveLength(12);
    expect(result.episodes.filter((e) => e.success).length).toBeGreaterThan(6);
    expect(child!.exitCode).toBeNull();
    expect(await (await fetch(`${new URL(base).origin}/health`)).json()).toMatchObject({ status: "healthy" });
  } finally {
    for (const ws of silent) ws.terminate();
  }
});
