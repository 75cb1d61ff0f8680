// Issue #12, "the first hour": each wall a newcomer hit, re-run as written, in a real process.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type MockEngine, startMockEngine } from "../../src/mock-engine/server.ts";
import { readEpisodeFile } from "../../src/record/episode-file.ts";
import { type CliResult, expectUsageError, ROOT, rollgym, spawnServe } from "../helpers/cli.ts";
import { FIXTURES } from "../helpers/fixtures.ts";
import { until } from "../helpers/ws-client.ts";
import { runInProcess } from "./in-process.ts";

const dir = mkdtempSync(join(tmpdir(), "rollgym-first-hour-"));
const RAGEN_FROZEN_LAKE = join(FIXTURES, "config", "ragen_frozen_lake.yaml");

/** `node src/cli/main.ts …` (no npx in between, so signals reach rollgym itself). */
function start(args: readonly string[]): {
  child: ChildProcess;
  result: Promise<CliResult>;
  stderrLine: (re: RegExp) => Promise<string>;
} {
  const child = spawn(process.execPath, ["src/cli/main.ts", ...args], {
    cwd: ROOT,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout!.setEncoding("utf8").on("data", (d: string) => (stdout += d));
  const waiting: { re: RegExp; resolve: (line: string) => void }[] = [];
  createInterface({ input: child.stderr! }).on("line", (line) => {
    stderr += `${line}\n`;
    for (const w of waiting.splice(0)) {
      if (w.re.test(line)) w.resolve(line);
      else waiting.push(w);
    }
  });
  const result = new Promise<CliResult>((resolve) =>
    child.on("close", (code) => resolve({ code, stdout, stderr })),
  );
  const stderrLine = (re: RegExp) =>
    new Promise<string>((resolve) => {
      const seen = stderr.split("\n").find((l) => re.test(l));
      if (seen) resolve(seen);
      else waiting.push({ re, resolve });
    });
  return { child, result, stderrLine };
}

describe.concurrent("the first hour", () => {
  let engine: MockEngine;
  beforeAll(async () => {
    // Slow enough that a train batch takes many seconds at two requests in flight.
    engine = await startMockEngine({ model: "slow", ttftMs: 60 });
  });
  afterAll(async () => {
    await engine?.close();
  });
  const slowRollout = (out: string, extra: string[] = [], url = engine.url) => [
    "rollout",
    "--llm",
    url,
    "--model",
    "slow",
    "--concurrency",
    "2",
    "--out",
    out,
    // One turn each: episodes finish one by one, 2 at a time, a batch taking ~4 s.
    "agent_proxy.max_turn=1",
    ...extra,
  ];
  // A signal test's own engine: its answers say when the rollout is under way (requests are
  // sent only once the signal handlers are armed), whatever the other tests ask of theirs.
  const ownEngine = async () => {
    const own = await startMockEngine({ model: "slow", ttftMs: 60 });
    const base = () => own.stats().completed;
    let from = 0;
    return {
      url: own.url,
      /** Resolves once `n` more answers have been given since the last call. */
      answered: async (n: number) => {
        from += n;
        await until(() => base() >= from);
      },
      /** Answers given so far count as seen (a second rollout on the same engine). */
      skip: () => {
        from = base();
      },
      close: () => own.close(),
    };
  };

  it("an --out that cannot be written is refused before any work, in one line", async () => {
    expectUsageError(await rollgym(["rollout", "--out", "/no/such/dir/x.jsonl"]), ["--out", "/no/such/dir"]);
    expectUsageError(await rollgym(["rollout", "--out", dir]), ["--out", "is a directory"]);
  });

  it("a write error at the end (ENOSPC, EIO) still prints the metrics, then one line, exit 1", async () => {
    const r = await rollgym(["rollout", "--tag", "Bandit", "--groups", "2", "--out", "/dev/full", "--json"]);
    expect(r.code).toBe(1);
    expect(JSON.parse(r.stdout)).toMatchObject({ episodes: 32 });
    expect(r.stderr.trimEnd().split("\n").at(-1)).toMatch(
      /^rollgym: --out: could not write .*\/dev\/full.*ENOSPC/,
    );
    expect(r.stderr).not.toMatch(/\bat .*:\d+:\d+/);
  });

  it("SIGINT stops a rollout gracefully: finished episodes in the file, their metrics printed", async () => {
    const out = join(dir, "interrupted.jsonl");
    const own = await ownEngine();
    const run = start(slowRollout(out, [], own.url));
    // One turn each: three answers, and at least one episode has finished.
    await own.answered(3);
    run.child.kill("SIGINT");
    const r = await run.result;
    await own.close();
    expect(r.code, r.stderr).toBe(130);
    expect(r.stdout).toMatch(/train\/CoordSokoban\/success/);
    expect(r.stdout).toMatch(/\d+ of 128 episodes, .* \(interrupted by SIGINT\)/);
    expect(r.stderr).toMatch(/rollgym: interrupted by SIGINT: \d+ of 128 episodes had finished/);
    expect(r.stderr).not.toMatch(/\bat .*:\d+:\d+/);
    const file = await readEpisodeFile(out);
    expect(file.summary.interrupted).toBe("SIGINT");
    expect(file.episodes.length).toBeGreaterThan(0);
    expect(file.episodes.length).toBeLessThan(128);
    expect(file.summary.episodes).toBe(file.episodes.length);
    for (const e of file.episodes) {
      expect(e.failure).toBeNull();
      expect(e.turns.length).toBeGreaterThan(0);
    }
    // The progress line ends with the final count, though stderr is not a terminal.
    expect(r.stderr).toMatch(new RegExp(`\\] ${file.episodes.length}/128 episodes`));
  });

  it("SIGTERM does the same (--json says so); a second signal exits at once", async () => {
    const out = join(dir, "terminated.jsonl");
    const own = await ownEngine();
    const run = start(slowRollout(out, ["--json"], own.url));
    await own.answered(1);
    run.child.kill("SIGTERM");
    const r = await run.result;
    expect(r.code).toBe(143);
    const summary = JSON.parse(r.stdout) as { interrupted: string; episodes: number };
    expect(summary.interrupted).toBe("SIGTERM");
    expect((await readEpisodeFile(out)).episodes).toHaveLength(summary.episodes);

    own.skip();
    const twice = start(slowRollout(join(dir, "twice.jsonl"), [], own.url));
    await own.answered(1);
    twice.child.kill("SIGINT");
    await twice.stderrLine(/SIGINT: stopping/);
    twice.child.kill("SIGINT");
    const t = await twice.result;
    await own.close();
    expect(t.code).toBe(130);
    expect(t.stderr).toContain("SIGINT again: stopping at once");
  });

  it("a pasted RAGEN config tweaking a tag (custom_envs.CoordFrozenLake.env_config) merges into it", async () => {
    const r = await rollgym(["rollout", "--config", RAGEN_FROZEN_LAKE, "--json"]);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ episodes: 128, failed: 0 });
    const listed = await runInProcess(["envs", "list", "--config", RAGEN_FROZEN_LAKE]);
    const lake = listed.stdout
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l))
      .find((l) => l.tag === "CoordFrozenLake");
    // success_rate from the file, the rest (observation format, size, p) kept from the tag.
    expect(lake).toMatchObject({ env_type: "frozen_lake", config: { success_rate: 1, size: 4, p: 0.9 } });
    const { url, child } = await spawnServe(["--config", RAGEN_FROZEN_LAKE]);
    try {
      const envs = (await (await fetch(`${url}/v1/envs`)).json()) as {
        envs: { tag: string; config: object }[];
      };
      expect(envs.envs.find((e) => e.tag === "CoordFrozenLake")?.config).toMatchObject({ success_rate: 1 });
    } finally {
      child.kill("SIGTERM");
    }
  });

  it("custom_envs errors name the full dotted key and the file:line", async () => {
    const file = join(dir, "typo.yaml");
    writeFileSync(file, "custom_envs:\n  CoordFrozenLake:\n    env_config:\n      succes_rate: 1\n");
    expectUsageError(await runInProcess(["rollout", "--config", file]), [
      "custom_envs.CoordFrozenLake.env_config.succes_rate",
      `${file}:4`,
      "success_rate",
    ]);
    const fresh = join(dir, "fresh.yaml");
    writeFileSync(fresh, "custom_envs:\n  Mine:\n    env_config:\n      size: 4\n");
    expectUsageError(await runInProcess(["envs", "list", "--config", fresh]), [
      "custom_envs.Mine.env_type",
      `${fresh}:2`,
      "new tag",
    ]);
  });

  it("seeds past 2^32 − 1 and oversized batches are refused, never wrapped or crashed into", async () => {
    for (const [args, mentions] of [
      [
        ["--seed", "4294967295"],
        ["--seed", "4294967295", "4294967288"],
      ],
      [
        ["--step", "536870912"],
        ["--step", "536870912", "4294967295"],
      ],
      [
        ["--tag", "Bandit", "--groups", "99999999999"],
        ["--groups", "max_groups_per_rollout", "4096"],
      ],
      [
        ["--tag", "Bandit", "--groups", "1000000", "--group-size", "1000"],
        ["--groups", "max_groups_per_rollout"],
      ],
      [
        ["--tag", "Bandit", "--groups", "4096", "--group-size", "1000"],
        ["--group-size", "max_episodes_in_flight"],
      ],
    ] as const) {
      // In process: five processes in a row outlast the test's limit on a loaded machine, and
      // the exit path of a usage error is the same one the other tests run for real.
      expectUsageError(await runInProcess(["rollout", ...args]), mentions);
    }
  });

  it("`parse --action-sep ''` is one line, and `envs sample … | head -1` ends quietly", async () => {
    expectUsageError(await rollgym(["parse", "SimpleSokoban", "--action-sep", ""], "<answer>Up</answer>"), [
      "--action-sep",
      "agent_proxy.action_sep",
      "non-empty",
    ]);
    const piped = await new Promise<CliResult>((resolve) => {
      const child = spawn(
        "bash",
        [
          "-c",
          `set -o pipefail; "${process.execPath}" src/cli/main.ts envs sample SimpleSokoban --seeds 0..200000 | head -1`,
        ],
        { cwd: ROOT },
      );
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (d) => (stdout += d));
      child.stderr.on("data", (d) => (stderr += d));
      child.on("close", (code) => resolve({ code, stdout, stderr }));
    });
    expect(piped.code).toBe(0);
    expect(piped.stdout.split("\n").filter(Boolean)).toHaveLength(1);
    expect(piped.stderr).not.toMatch(/EPIPE|\bat .*:\d+:\d+/);
  });

  it("~key deletes what a file set; --model without --llm is refused", async () => {
    const file = join(dir, "turns.yaml");
    writeFileSync(file, "agent_proxy:\n  max_turn: 0\n");
    expectUsageError(await runInProcess(["rollout", "--config", file]), [
      "agent_proxy.max_turn",
      `${file}:2`,
    ]);
    const r = await runInProcess([
      "rollout",
      "--config",
      file,
      "~agent_proxy.max_turn",
      "--tag",
      "Bandit",
      "--groups",
      "2",
      "--json",
    ]);
    expect(r.code, r.stderr).toBe(0);
    expectUsageError(await runInProcess(["rollout", "--model", "qwen"]), ["--model", "--llm", "qwen"]);
    expectUsageError(
      await runInProcess(["rollout", "--llm", "http://127.0.0.1:9/v1", "--model", "m", "--policy", "random"]),
      ["--policy", "--llm"],
    );
  });

  it("--pretty draws boards and prompts instead of JSON strings full of \\n", async () => {
    const play = await runInProcess([
      "envs",
      "play",
      "SimpleSokoban",
      "--seed",
      "10000",
      "--actions",
      "Left,Up,Up",
      "--pretty",
    ]);
    expect(play.code).toBe(0);
    expect(play.stdout).not.toContain("\\n");
    expect(play.stdout).toContain(
      "action: Up\nreward: 10.9\ndone: true\nsuccess: true\neffective: true\nobservation:\n  │ ######\n",
    );
    const prompt = await runInProcess(["envs", "prompt", "CoordSokoban", "--seed", "10000", "--pretty"]);
    expect(prompt.stdout).toMatch(
      /^messages:\n {2}\[0\]:\n {4}role: system\n {4}content:\n {6}│ You're a helpful assistant/,
    );
    for (const argv of [
      ["envs", "list"],
      ["envs", "sample", "Bandit", "--seeds", "1..2"],
      ["envs", "check", "Bandit"],
      ["filter"],
      ["parse", "Bandit"],
    ]) {
      const r = await runInProcess(
        [...argv, "--pretty"],
        argv[0] === "filter" ? "[[0, 1]]" : "<answer>x</answer>",
      );
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).not.toMatch(/^\{/m);
    }
  });

  it("the Python README's first example reads only metrics a default rollout has", async () => {
    const readme = readFileSync(join(ROOT, "python", "README.md"), "utf8");
    const read = [...readme.matchAll(/metrics\["([^"]+)"\]/g)].map((m) => m[1]);
    expect(read.length).toBeGreaterThan(0);
    // Half a second as a rule; it once ran past vitest's 60 s in CI, not seen again: the deadline
    // makes a repeat say where it stood.
    const r = await runInProcess(["rollout", "--json"], "", 45_000);
    const { metrics } = JSON.parse(r.stdout) as { metrics: Record<string, number> };
    for (const key of read) expect(metrics).toHaveProperty([key]);
  });
});
