// `rollgym sft`: SFT conversations from the built-in solvers, checked against the envs they
// claim to come from, and one-line errors for bad input.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { expectUsageError, jsonLines, rollgym } from "../helpers/cli.ts";

const dir = mkdtempSync(join(tmpdir(), "rollgym-sft-"));

/** A real Python 3 without pyarrow on any machine: this one's, with its site-packages left out. */
const BARE_PYTHON = join(dir, "python-without-site");
writeFileSync(BARE_PYTHON, '#!/bin/sh\nexec python3 -I -S "$@"\n', { mode: 0o755 });

/** A Python with pyarrow, if this machine has one (the closed loop's venv, docs/closed-loop.md). */
const PYARROW_PYTHON = [
  process.env.ROLLGYM_TRAIN_PYTHON,
  join(homedir(), ".cache", "rollgym", "train-venv", "bin", "python"),
].find((python) => python && existsSync(python) && spawnSync(python, ["-c", "import pyarrow"]).status === 0);

interface Example {
  messages: { role: string; content: string }[];
  data_source: string;
  extra_info: { seed: number; env_id: number; turns: number; success: boolean; reward: number; arm?: string };
}

function examples(file: string): Example[] {
  return jsonLines(readFileSync(file, "utf8")) as unknown as Example[];
}

describe.concurrent("rollgym sft", () => {
  it("Bandit with --arm-mix 0.5: half the answers pull the high-risk arm, each the env's first prompt and one answer", async () => {
    const out = join(dir, "bandit.jsonl");
    const r = await rollgym([
      "sft",
      "--tag",
      "Bandit",
      "--groups",
      "64",
      "--arm-mix",
      "0.5",
      "--max-turn",
      "1",
      "--out",
      out,
    ]);
    expect(r.code, r.stderr).toBe(0);
    const rows = examples(out);
    expect(rows).toHaveLength(64);
    expect(rows.filter((x) => x.extra_info.arm === "high")).toHaveLength(32);
    // The env's own prompt (envs prompt) and the arm actually pulled.
    const prompt = await rollgym(["envs", "prompt", "Bandit", "--seed", String(rows[5].extra_info.seed)]);
    const first = (JSON.parse(prompt.stdout) as { messages: unknown[] }).messages;
    expect(rows[5].messages.slice(0, 2)).toEqual(first);
    for (const x of rows) {
      expect(x.messages.map((m) => m.role)).toEqual(["system", "user", "assistant"]);
      const answer = /^<think>Pulling (\w+)\.<\/think><answer>(\w+)<\/answer>$/.exec(x.messages[2].content);
      expect(answer, x.messages[2].content).not.toBeNull();
      expect(answer![1]).toBe(answer![2]);
      expect(x.messages[1].content).toContain(`named `);
      expect(x.messages[1].content).toContain(answer![1]);
      expect(x.extra_info.success).toBe(x.extra_info.arm === "high");
      if (x.extra_info.arm === "low") expect(x.extra_info.reward).toBe(0.1);
    }
  });

  it("SimpleSokoban: the BFS plan over several turns, with the env's reward messages in between", async () => {
    const out = join(dir, "sokoban.jsonl");
    const r = await rollgym([
      "sft",
      "--tag",
      "SimpleSokoban",
      "--groups",
      "6",
      "--seed",
      "10000",
      "--out",
      out,
    ]);
    expect(r.code, r.stderr).toBe(0);
    const rows = examples(out);
    expect(rows).toHaveLength(6);
    for (const x of rows) expect(x.extra_info.success).toBe(true);
    // Seed 10000's BFS solution is Left, Up, Up (facts §1.2): two actions, then one.
    const seed = rows[0];
    expect(seed.extra_info.turns).toBe(2);
    expect(seed.messages.map((m) => m.role)).toEqual(["system", "user", "assistant", "user", "assistant"]);
    expect(seed.messages[2].content).toBe(
      "<think>Following the plan Left, Up, Up.</think><answer>Left || Up</answer>",
    );
    expect(seed.messages[3].content).toMatch(/^Reward:\n-0\.2\n\nTurn 2:\nState:\n/);
    expect(seed.messages[4].content).toBe("<think>Following the plan Up.</think><answer>Up</answer>");
  });

  it("refuses an arm mix outside [0, 1] or on a tag that is not a bandit, and a missing --out", async () => {
    const out = join(dir, "x.jsonl");
    expectUsageError(await rollgym(["sft", "--tag", "Bandit", "--arm-mix", "1.5", "--out", out]), [
      "--arm-mix",
      "1.5",
      "[0, 1]",
    ]);
    expectUsageError(await rollgym(["sft", "--tag", "SimpleSokoban", "--arm-mix", "0.5", "--out", out]), [
      "--arm-mix",
      "SimpleSokoban",
      "bandit",
    ]);
    expectUsageError(await rollgym(["sft", "--tag", "Bandit"]), ["--out"]);
    expectUsageError(await rollgym(["sft", "--tag", "Bandit", "--format", "csv", "--out", out]), [
      "--format",
      "csv",
    ]);
  });

  // The docs' command (docs/closed-loop.md): its 1,000 rows overflow the pipe to a writer that
  // has already exited, which used to end in Node's EPIPE stack trace.
  const PARQUET = [
    "sft",
    "--tag",
    "SimpleSokoban",
    "--groups",
    "1000",
    "--seed",
    "100000",
    "--format",
    "parquet",
  ];

  it("--format parquet with a Python lacking pyarrow, or no Python at all, is one line naming the fix, before any work", async () => {
    const out = join(dir, "none.parquet");
    expectUsageError(await rollgym([...PARQUET, "--out", out, "--python", BARE_PYTHON]), [
      "--format parquet needs pyarrow",
      `--python ${BARE_PYTHON}`,
      "pip install pyarrow",
      "give --python EXE",
    ]);
    expectUsageError(await rollgym([...PARQUET, "--out", out, "--python", "/bad"]), [
      "--python /bad: no such file",
    ]);
    expect(existsSync(out)).toBe(false);
  });

  it.skipIf(PYARROW_PYTHON === undefined)(
    "--format parquet writes the JSONL rows as a parquet table",
    async () => {
      const args = ["sft", "--tag", "SimpleSokoban", "--groups", "6", "--seed", "10000"];
      const jsonl = join(dir, "rows.jsonl");
      const parquet = join(dir, "rows.parquet");
      expect((await rollgym([...args, "--out", jsonl])).code).toBe(0);
      const r = await rollgym([
        ...args,
        "--out",
        parquet,
        "--format",
        "parquet",
        "--python",
        PYARROW_PYTHON!,
      ]);
      expect(r.code, r.stderr).toBe(0);
      const read = spawnSync(
        PYARROW_PYTHON!,
        [
          "-c",
          "import json, sys, pyarrow.parquet as pq; print(json.dumps(pq.read_table(sys.argv[1]).to_pylist()))",
          parquet,
        ],
        { encoding: "utf8" },
      );
      expect(read.status, read.stderr).toBe(0);
      const rows = examples(jsonl).map(({ messages, data_source }) => ({ messages, data_source }));
      expect(
        (JSON.parse(read.stdout) as Example[]).map(({ messages, data_source }) => ({
          messages,
          data_source,
        })),
      ).toEqual(rows);
    },
  );
});
