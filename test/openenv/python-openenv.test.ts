// An OpenEnv-style Python client (test/openenv/openenv_client.py, Debian's python3-websockets)
// plays rollgym's tags on a real `rollgym serve` over /openenv/TAG/ws, several sessions at once;
// every observation, reward and done flag must equal `rollgym envs play` for the same seed and
// actions, and the first observation `rollgym envs sample`'s.

import type { ChildProcess } from "node:child_process";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jsonLines, ROOT, spawnServe } from "../helpers/cli.ts";

const PYTHON = "/usr/bin/python3";

interface Episode {
  tag: string;
  seed: number;
  /** Actions before the solution from the reset state (none: the episode must succeed). */
  prefix: string[];
}

const EPISODES: Episode[] = [
  { tag: "CoordSokoban", seed: 3, prefix: [] },
  { tag: "CoordSokoban", seed: 4, prefix: ["Up", "Right", "Down"] },
  { tag: "CoordSokoban", seed: 5, prefix: ["Down", "Down", "Left", "Up", "Right", "Up"] },
  { tag: "FrozenLake", seed: 5, prefix: ["Left", "Up"] },
];

let server: { url: string; child: ChildProcess } | null = null;
beforeAll(async () => {
  server = await spawnServe();
}, 60_000);
afterAll(() => {
  server?.child.kill();
});

/** `rollgym ARGS` (node on src/cli/main.ts, as npx runs it, without npx's start-up): its JSON lines. */
async function rollgym(args: string[]): Promise<Record<string, unknown>[]> {
  const { stdout } = await promisify(execFile)(process.execPath, ["src/cli/main.ts", ...args], {
    cwd: ROOT,
    timeout: 60_000,
  });
  return jsonLines(stdout);
}

/** First observations and solutions of consecutive seeds, from `rollgym envs sample`. */
async function sample(
  tag: string,
  seeds: number[],
): Promise<Map<number, { observation: string; solution: string[] }>> {
  const lines = await rollgym([
    "envs",
    "sample",
    tag,
    "--seeds",
    `${Math.min(...seeds)}..${Math.max(...seeds)}`,
    "--solve",
  ]);
  return new Map(
    lines.map((l) => [l.seed as number, l as unknown as { observation: string; solution: string[] }]),
  );
}

interface Played {
  seed: number;
  reset: string;
  steps: Record<string, unknown>[];
  state: Record<string, unknown>;
}

async function playOverWs(tag: string, episodes: { seed: number; actions: string[] }[]): Promise<Played[]> {
  const { stdout } = await promisify(execFile)(
    PYTHON,
    [join(ROOT, "test/openenv/play_over_ws.py"), `${server!.url}/openenv/${tag}`, JSON.stringify(episodes)],
    {
      cwd: join(ROOT, "test/openenv"),
      env: { ...process.env, PYTHONDONTWRITEBYTECODE: "1" },
      timeout: 60_000,
    },
  );
  return JSON.parse(stdout) as Played[];
}

describe("an OpenEnv client plays rollgym's tags over /ws", () => {
  for (const tag of new Set(EPISODES.map((e) => e.tag))) {
    it(`${tag}: the same observations, rewards and done flags as rollgym envs play`, {
      timeout: 180_000,
    }, async () => {
      const mine = EPISODES.filter((e) => e.tag === tag);
      const samples = await sample(
        tag,
        mine.map((e) => e.seed),
      );
      const planned = mine.map((e) => {
        const { observation, solution } = samples.get(e.seed)!;
        return { seed: e.seed, first: observation, actions: [...e.prefix, ...solution] };
      });
      const played = await playOverWs(tag, planned);
      for (const [i, plan] of planned.entries()) {
        const expected = await rollgym([
          "envs",
          "play",
          tag,
          "--seed",
          String(plan.seed),
          "--actions",
          plan.actions.join(","),
        ]);
        const got = played[i];
        expect(got.seed).toBe(plan.seed);
        expect(got.reset).toBe(plan.first);
        expect(got.steps).toEqual(expected);
        expect(got.state).toMatchObject({
          episode_id: `seed-${plan.seed}`,
          step_count: expected.length,
          tag,
          seed: plan.seed,
          done: expected.at(-1)?.done === true,
        });
        // A bare solution reaches the goal: the success step's reward came over the wire too.
        if (mine[i].prefix.length === 0)
          expect(got.steps.at(-1)).toMatchObject({ success: true, done: true });
      }
    });
  }
});
