// rollgym shards on Ray (python/rollgym_client/ray.py, issue 34) and sharded rollouts over them
// (python/rollgym_client/sharded.py; the fields left out of the comparison are PER_PROCESS in
// test/python/json_checks.py), one of 3 shards killed mid-stream (shard_failure.py), and weight
// updates over them (each shared replica paused once: ray_check.py update), under a Python with
// Ray 2.58:
// the venv .ci/run makes at ~/.cache/rollgym/ray-venv (or $ROLLGYM_RAY_PYTHON). Without Ray
// the Ray tests are skipped with the reason in their name and a warning, never passed; the
// import guard is checked with Debian's Python, which has no Ray.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ROOT } from "../helpers/cli.ts";

const RAY_PYTHON =
  process.env.ROLLGYM_RAY_PYTHON ?? join(homedir(), ".cache", "rollgym", "ray-venv", "bin", "python");
const PLAIN_PYTHON = "/usr/bin/python3";
// How a shard runs rollgym: this checkout under this Node (24).
const COMMAND = JSON.stringify([process.execPath, join(ROOT, "bin", "rollgym.js")]);

function python(
  executable: string,
  args: readonly string[],
  timeoutMs: number,
  env: Record<string, string> = {},
) {
  return spawnSync(executable, ["-W", "ignore", ...args], {
    cwd: ROOT,
    encoding: "utf8",
    timeout: timeoutMs,
    env: { ...process.env, PYTHONPATH: "python", PYTHONDONTWRITEBYTECODE: "1", ...env },
  });
}

/** Why Ray cannot be used here, or null when it can. */
function rayMissing(): string | null {
  const probe = python(RAY_PYTHON, ["-c", "import ray; print(ray.__version__)"], 60_000);
  if (probe.error) return `${RAY_PYTHON} cannot run (${probe.error.message})`;
  if (probe.status !== 0)
    return `${RAY_PYTHON} cannot import ray (${probe.stderr.trim().split("\n").at(-1)})`;
  return null;
}

const missing = rayMissing();
if (missing) {
  console.warn(
    `SKIPPED python-ray tests: ${missing}; install with ` +
      "`python3 -m venv ~/.cache/rollgym/ray-venv && ~/.cache/rollgym/ray-venv/bin/pip install ray==2.58.0 numpy msgpack websockets aiohttp` (.ci/run does)",
  );
}

/** Runs a check script of test/python under the Ray venv; its last stdout line is its JSON summary. */
function runCheck(script: string, timeoutMs: number, args: readonly string[] = []): Record<string, unknown> {
  const result = python(RAY_PYTHON, [join("test", "python", script), ...args], timeoutMs, {
    ROLLGYM_COMMAND: COMMAND,
  });
  expect(result.status, `${result.stdout}\n${result.stderr}`).toBe(0);
  return JSON.parse(result.stdout.trim().split("\n").at(-1) ?? "{}") as Record<string, unknown>;
}

const EXAMPLE = "python/examples/ray_shards.py";

describe("docs/ray.md's example", () => {
  it(`is ${EXAMPLE}, word for word`, () => {
    const doc = readFileSync(join(ROOT, "docs", "ray.md"), "utf8");
    const at = doc.indexOf(`<!-- ${EXAMPLE} `);
    expect(at, `the ${EXAMPLE} marker in docs/ray.md`).toBeGreaterThanOrEqual(0);
    const block = /```python\n([\s\S]*?)```/.exec(doc.slice(at));
    expect(block?.[1]).toBe(readFileSync(join(ROOT, EXAMPLE), "utf8"));
  });
});

describe("rollgym_client.ray without Ray", () => {
  it("refuses to import with an ImportError that says how to install Ray", () => {
    const result = python(PLAIN_PYTHON, ["-c", "import rollgym_client.ray"], 60_000);
    // Debian's Python has no Ray; if it ever does, this check has nothing to check.
    const hasRay = python(PLAIN_PYTHON, ["-c", "import ray"], 60_000).status === 0;
    expect(hasRay, `${PLAIN_PYTHON} can import ray: use a Python without it here`).toBe(false);
    expect(result.status).not.toBe(0);
    expect(result.stderr).toMatch(/ImportError: rollgym_client\.ray needs Ray: pip install ray/);
    // The rest of the client still imports.
    expect(python(PLAIN_PYTHON, ["-c", "import rollgym_client"], 60_000).status).toBe(0);
  });
});

describe.skipIf(missing !== null)(
  `rollgym shards as Ray actors${missing ? ` (skipped: ${missing})` : ""}`,
  () => {
    it("1, 2 and 3 shards: /healthz ok, the same batch as a lone server, merged batches and endless-stream windows equal to one server's (built-in policy, mock engine), a clean stop", () => {
      expect(runCheck("ray_check.py", 240_000)).toMatchObject({
        ok: true,
        checked: [
          { shards: 1, urls: 1 },
          { shards: 2, urls: 2 },
          { shards: 3, urls: 3 },
        ],
        episodes: 16,
        // ShardedClient.rollout over 1, 2 and 3 shards equals one server's batch for each.
        sharded: ["train-filtered-batch", "train-filtered-stream", "train-step", "val"],
        // And against the mock engine (a remote engine, seeded requests).
        mock_sharded: ["mock-train-filtered", "mock-val-stream"],
        // And ShardedClient.stream: the first two windows of an endless stream.
        stream_windows: 2,
      });
    }, 300_000);

    it("3 shards, the first (it judges) killed with SIGKILL mid-stream: every group handed out once, the windows equal to a lone server's, the stream goes on", () => {
      const summary = runCheck("ray_check.py", 180_000, ["shard-failure"]);
      expect(summary).toMatchObject({ ok: true, shards: 3, victim: 0 });
      // Windows compared: from 0 to WINDOWS_AFTER (3) past the first one played again elsewhere.
      expect(summary.windows).toBe((summary.from_window as number) + 3);
    }, 240_000);

    it("an update over 3 shards sharing 2 mock replicas: each replica paused and resumed once (the mock's /metrics), every turn's stamp the engine's, turns of follower shards spanning it included; updates a follower or the lead refuses pause nothing and reopen every shard", () => {
      const summary = runCheck("ray_check.py", 180_000, ["update"]);
      expect(summary).toMatchObject({
        ok: true,
        replicas: [
          { pauses: 1, resumes: 1, "/pause": 1, "/resume": 1 },
          { pauses: 1, resumes: 1, "/pause": 1, "/resume": 1 },
        ],
      });
      expect(summary.follower_spanning).toBeGreaterThan(0);
    }, 240_000);

    it(`${EXAMPLE} runs as written: two shards, one filtered batch, one weight update`, () => {
      // No PYTHONPATH: the example finds the checkout's client by its own sys.path line.
      const result = python(RAY_PYTHON, [EXAMPLE, "2"], 180_000, {
        ROLLGYM_COMMAND: COMMAND,
        PYTHONPATH: "",
      });
      expect(result.status, `${result.stdout}\n${result.stderr}`).toBe(0);
      expect(result.stdout).toContain("shards: ['ok', 'ok']");
      // top_k 0.5 of 6 groups keeps 3: 12 episodes.
      expect(result.stdout).toMatch(/^kept groups \[\d, \d, \d\] of 6, 12 episodes, scores \[/m);
      expect(result.stdout).toMatch(/^success \d\.\d{3}$/m);
      // The update: shard 0 paused the engines, shard 1's were held elsewhere.
      expect(result.stdout).toContain("version step-1 ['pause', 'held_elsewhere']");
    }, 240_000);
  },
);
