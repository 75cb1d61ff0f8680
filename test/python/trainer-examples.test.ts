// The trainer examples as a user meets them (issue #30): python/README.md's trainer loop is
// python/examples/trainer_quickstart.py, word for word, and runs as written against `rollgym
// serve --llm` and the mock engine; a trainer counting from 0 against a server an earlier trainer
// moved to version 3 is refused at begin_update; python/examples/async_trainer.py, with the
// trainer role behind a trainer token, trains on per-token ages consistent with the versions.
import type { ChildProcess } from "node:child_process";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type MockEngine, startMockEngine } from "../../src/mock-engine/server.ts";
import { ROOT, spawnServe } from "../helpers/cli.ts";

const run = promisify(execFile);
const PYTHON_ENV = { ...process.env, PYTHONPATH: join(ROOT, "python"), PYTHONDONTWRITEBYTECODE: "1" };

/** Runs `args` under Debian's python3 from the repository root; resolves to its stdout. */
async function python(args: string[], env: Record<string, string> = {}): Promise<string> {
  const { stdout } = await run("/usr/bin/python3", args, {
    cwd: ROOT,
    env: { ...PYTHON_ENV, ...env },
    timeout: 120_000,
  });
  return stdout;
}

/** The python block that follows `marker` in `markdown`. */
function blockAfter(markdown: string, marker: string): string {
  const at = markdown.indexOf(marker);
  expect(at, `${marker} in the README`).toBeGreaterThanOrEqual(0);
  const match = /```python\n([\s\S]*?)```/.exec(markdown.slice(at));
  expect(match, `a python block after ${marker}`).not.toBeNull();
  return match![1]!;
}

let engine: MockEngine;
let open: { url: string; child: ChildProcess };

beforeAll(async () => {
  engine = await startMockEngine({ model: "mock", seed: 5 });
  open = await spawnServe(["--llm", engine.url, "--model", "mock"]);
});
afterAll(async () => {
  open?.child.kill("SIGTERM");
  await engine?.close();
});

describe("the README's trainer loop", () => {
  const readme = readFileSync(join(ROOT, "python/README.md"), "utf8");
  const file = "python/examples/trainer_quickstart.py";

  it("is examples/trainer_quickstart.py, word for word", () => {
    const block = blockAfter(readme, `<!-- ${file} `);
    expect(block).toBe(readFileSync(join(ROOT, file), "utf8"));
  });

  it("runs as written: three updates from a fresh server's version 0, then a stale start is refused at begin_update", async () => {
    // The README's block itself, run from a file of its own.
    const script = join(mkdtempSync(join(tmpdir(), "rollgym-readme-")), "readme_trainer.py");
    writeFileSync(script, blockAfter(readme, `<!-- ${file} `));
    const out = await python([script, open.url, "3"]);
    const updates = [...out.matchAll(/^update (update-\S+): the engines run version (\d+)$/gm)];
    expect(updates.map((m) => Number(m[2]))).toEqual([1, 2, 3]);
    expect(new Set(updates.map((m) => m[1])).size).toBe(3);
    const ages = [...out.matchAll(/ages \[([\d, -]*)\]/g)].map((m) => m[1]!.split(", ").map(Number));
    expect(ages).toHaveLength(3);
    for (const step of ages) for (const age of step) expect(age).toBeGreaterThanOrEqual(0);

    // A trainer counting from 0 against the server now at version 3.
    const stale = await python(["test/python/stale_start_check.py"], {
      ROLLGYM_URL: open.url,
      ROLLGYM_EXPECT_VERSION: "3",
    });
    expect(JSON.parse(stale.trim().split("\n").at(-1)!).message).toMatch(
      /^\[update\] version\.ordinal: got 1, must be greater than the current 3 \("step-3"\) and at most 2147483647; begin_update "update-\w+-\d+" is refused before any engine paused/,
    );
    expect(engine.isPaused()).toBe(false);

    // The loop as written counts on from the version in force.
    const again = await python([file, open.url, "1"]);
    expect(again).toMatch(/^update update-\S+: the engines run version 4$/m);
  }, 150_000);
});

describe("examples/async_trainer.py", () => {
  it("takes the trainer role with the server's trainer token and trains on ages consistent with the versions", async () => {
    const dir = mkdtempSync(join(tmpdir(), "rollgym-trainer-"));
    const tokenFile = join(dir, "trainer-token");
    writeFileSync(tokenFile, "example-trainer-token-7f3a\n");
    const reserved = await spawnServe([
      "--llm",
      engine.url,
      "--model",
      "mock",
      "--trainer-token-file",
      tokenFile,
    ]);
    try {
      const out = await python([
        "python/examples/async_trainer.py",
        reserved.url,
        "--updates",
        "3",
        "--trainer-token-file",
        tokenFile,
      ]);
      type Step = {
        version: number;
        groups: { group: number; min_version: number; max_version: number; age: number }[];
        token_ages: Record<string, number>;
        token_versions: number[];
        update: string;
        now: { label: string; ordinal: number };
      };
      const steps = out
        .trim()
        .split("\n")
        .map((line) => JSON.parse(line) as Step);
      expect(steps.map((s) => s.version)).toEqual([0, 1, 2]);
      expect(new Set(steps.map((s) => s.update)).size).toBe(3);
      for (const step of steps) {
        expect(step.update).toMatch(/^update-\w+-\d+$/);
        expect(step.now).toEqual({ label: `step-${step.version + 1}`, ordinal: step.version + 1 });
        for (const g of step.groups) {
          expect(0 <= g.min_version && g.min_version <= g.max_version && g.max_version <= step.version).toBe(
            true,
          );
          expect(g.age).toBe(step.version - g.min_version);
        }
        // Each token's age is the step's version less the version that sampled it.
        const ages = Object.keys(step.token_ages).map(Number);
        const expected = step.token_versions.map((v) => step.version - v);
        expect(ages.sort((a, b) => a - b)).toEqual(expected.sort((a, b) => a - b));
        const oldest = Math.max(...step.groups.map((g) => g.age));
        for (const age of ages) expect(age >= 0 && age <= oldest).toBe(true);
      }
      // Later steps train on tokens from several versions: the ages are not all 0.
      expect(steps.some((s) => s.token_versions.length > 1 || s.token_versions[0] !== 0)).toBe(true);
    } finally {
      reserved.child.kill("SIGTERM");
    }
  }, 150_000);
});
