// The Python client (python/rollgym_client) under Debian's /usr/bin/python3: its unit
// tests against a fake server, then the client against a real `rollgym serve`, whose batches
// must match `rollgym rollout` on the same requests (same seed and policy ⇒ same data).
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jsonLines, ROOT, rollgym } from "../helpers/cli.ts";

const PYTHON = "/usr/bin/python3";
const TOKEN = "python-client-test-token";

interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(
  command: string,
  args: readonly string[],
  env: Record<string, string>,
  timeoutMs: number,
): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      cwd: ROOT,
      env: {
        ...process.env,
        PYTHONPATH: "python",
        PYTHONUNBUFFERED: "1",
        PYTHONDONTWRITEBYTECODE: "1",
        ...env,
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
    child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

function output(result: RunResult): string {
  return `exit ${result.code}\n--- stdout\n${result.stdout}\n--- stderr\n${result.stderr}`;
}

interface Server {
  url: string;
  child: ChildProcess;
}

/** `npx rollgym serve --port 0 …`; resolves with the URL from its first line. */
function startServer(args: readonly string[]): Promise<Server> {
  // Its own process group, so stopping it also stops the node process npx starts.
  const child = spawn("npx", ["rollgym", "serve", "--port", "0", ...args], {
    cwd: ROOT,
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  let stderr = "";
  child.stderr!.setEncoding("utf8").on("data", (d: string) => (stderr += d));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`rollgym serve printed no URL within 60 s\n${stderr}`)),
      60_000,
    );
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const match = /serving on (http:\/\/\S+)/.exec(line);
      if (match) {
        clearTimeout(timer);
        resolve({ url: match[1], child });
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`rollgym serve exited with ${code} before listening\n${stderr}`));
    });
  });
}

async function stopServer(server: Server | undefined): Promise<void> {
  if (!server || server.child.exitCode !== null || server.child.pid === undefined) return;
  const exited = new Promise((resolve) => server.child.once("exit", resolve));
  process.kill(-server.child.pid, "SIGTERM");
  await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 10_000))]);
  // A child ended by a signal has exitCode null but signalCode set: it is gone, not hung.
  if (server.child.exitCode === null && server.child.signalCode === null)
    process.kill(-server.child.pid, "SIGKILL");
}

interface PySummary {
  kept: number[];
  dropped: number[];
  failed_groups: number[];
  metrics: Record<string, number | null>;
  episodes: number;
  failed: number;
  arrays: Record<
    "env_ids" | "group_ids" | "scores" | "rewards" | "penalties" | "success",
    (number | boolean)[]
  >;
  dtypes: Record<string, string>;
  episode_env_ids: number[];
  group_scores: (number | null)[] | null;
}

type Line = Record<string, unknown>;

/** `rollgym rollout … --json --out FILE`: the summary line and the episode file. */
async function cliBatch(dir: string, args: readonly string[]) {
  const file = join(dir, `cli-${Math.random().toString(36).slice(2)}.jsonl`);
  const result = await rollgym(["rollout", ...args, "--json", "--out", file]);
  expect(result.code, `rollgym rollout ${args.join(" ")}\n${result.stderr}`).toBe(0);
  const summary = JSON.parse(result.stdout.trim().split("\n").at(-1)!) as {
    metrics: Record<string, number | null>;
    episodes: number;
    failed: number;
  };
  const lines = jsonLines(readFileSync(file, "utf8"));
  return {
    summary,
    episodes: lines.filter((l) => l.type === "episode") as Line[],
    groups: lines.filter((l) => l.type === "group") as Line[],
  };
}

function expectSameBatch(py: PySummary, cli: Awaited<ReturnType<typeof cliBatch>>): void {
  expect(py.metrics).toEqual(cli.summary.metrics);
  expect(py.episodes).toBe(cli.summary.episodes);
  expect(py.failed).toBe(cli.summary.failed);
  const kept = cli.groups.filter((g) => g.kept === true).map((g) => g.group_id as number);
  expect(py.kept).toEqual(kept);
  expect(py.dropped).toEqual(
    cli.groups.filter((g) => g.kept !== true && g.failed !== true).map((g) => g.group_id),
  );
  expect(py.failed_groups).toEqual(cli.groups.filter((g) => g.failed === true).map((g) => g.group_id));
  // The arrays cover the kept groups, in env-id order, as float32/int32/bool.
  const keptSet = new Set(kept);
  const episodes = cli.episodes
    .filter((e) => keptSet.has(e.group_id as number))
    .sort((a, b) => (a.env_id as number) - (b.env_id as number));
  const f32 = (key: string) => episodes.map((e) => Math.fround(e[key] as number));
  expect(py.dtypes).toEqual({
    env_ids: "int32",
    group_ids: "int32",
    scores: "float32",
    rewards: "float32",
    penalties: "float32",
    success: "bool",
  });
  expect(py.arrays.env_ids).toEqual(episodes.map((e) => e.env_id));
  expect(py.episode_env_ids).toEqual(episodes.map((e) => e.env_id));
  expect(py.arrays.group_ids).toEqual(episodes.map((e) => e.group_id));
  expect(py.arrays.scores).toEqual(f32("score"));
  expect(py.arrays.rewards).toEqual(f32("reward"));
  expect(py.arrays.penalties).toEqual(f32("penalty"));
  expect(py.arrays.success).toEqual(episodes.map((e) => e.success));
  if (py.group_scores !== null) {
    expect(py.group_scores).toEqual(cli.groups.filter((g) => g.kept === true).map((g) => g.score));
  }
}

describe("python client: unit tests against a fake server", () => {
  it("python3 -m unittest discover passes", async () => {
    const result = await run(
      PYTHON,
      ["-m", "unittest", "discover", "-s", "test/python", "-p", "test_*.py"],
      {},
      240_000,
    );
    expect(result.code, output(result)).toBe(0);
  }, 300_000);
});

describe("python client against rollgym serve", () => {
  let plain: Server | undefined;
  let noisy: Server | undefined;
  let dir: string;
  let py: Record<string, PySummary> | undefined;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "rollgym-python-"));
    [plain, noisy] = await Promise.all([
      startServer(["--policy", "oracle", "--token", TOKEN]),
      startServer(["--policy", "oracle", "rollgym.policy.noise=0.3", "rollgym.policy.malformed=0.2"]),
    ]);
  }, 120_000);

  afterAll(async () => {
    await Promise.all([stopServer(plain), stopServer(noisy)]);
    rmSync(dir, { recursive: true, force: true });
  });

  it("auth, train, val, stream, resume after a dropped connection, env hosting (python-side checks)", async () => {
    const out = join(dir, "python.json");
    const result = await run(
      PYTHON,
      ["test/python/real_server_check.py"],
      { ROLLGYM_URL: plain!.url, ROLLGYM_TOKEN: TOKEN, ROLLGYM_NOISY_URL: noisy!.url, ROLLGYM_OUT: out },
      240_000,
    );
    expect(result.code, output(result)).toBe(0);
    py = JSON.parse(readFileSync(out, "utf8")) as Record<string, PySummary>;
  }, 300_000);

  it("val batch = rollgym rollout --mode val --tag CoordSokoban --groups 16", async () => {
    expect(py, "the python run failed").toBeDefined();
    expectSameBatch(
      py!.val,
      await cliBatch(dir, ["--mode", "val", "--tag", "CoordSokoban", "--groups", "16"]),
    );
  }, 120_000);

  it("train batch = rollgym rollout --mode train --step 3", async () => {
    expect(py, "the python run failed").toBeDefined();
    const cli = await cliBatch(dir, [
      "--mode",
      "train",
      "--tag",
      "CoordSokoban",
      "--groups",
      "4",
      "--group-size",
      "4",
      "--step",
      "3",
    ]);
    expectSameBatch(py!.train, cli);
  }, 120_000);

  it("filtered train batch with a noisy policy = rollgym rollout with the same noise and filter", async () => {
    expect(py, "the python run failed").toBeDefined();
    const cli = await cliBatch(dir, [
      "--mode",
      "train",
      "--tag",
      "SimpleSokoban",
      "--groups",
      "8",
      "--group-size",
      "4",
      "--step",
      "1",
      "--noise",
      "0.3",
      "--malformed",
      "0.2",
      "--strategy",
      "top_p",
      "--value",
      "0.5",
    ]);
    expect(py!.noisy_train.dropped.length).toBeGreaterThan(0);
    expectSameBatch(py!.noisy_train, cli);
  }, 120_000);
});
