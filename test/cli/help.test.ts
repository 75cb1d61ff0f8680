// Every command and subcommand answers --help and -h from its flag specs; no command, or a
// group without its subcommand, prints the usage on stderr with status 2.
import { describe, expect, it } from "vitest";
import { expectUsageError, rollgym } from "../helpers/cli.ts";
import { runInProcess } from "./in-process.ts";

const COMMANDS = [
  ["envs", "list"],
  ["envs", "sample"],
  ["envs", "play"],
  ["envs", "prompt"],
  ["envs", "check"],
  ["parse"],
  ["filter"],
  ["rollout"],
  ["serve"],
  ["show"],
  ["mock-engine"],
  ["demo"],
  ["bench"],
  ["bench", "async"],
];

describe("help", () => {
  it.each(COMMANDS)("rollgym %s %s --help and -h print the options on stdout, exit 0", async (...words) => {
    for (const flag of ["--help", "-h"]) {
      const r = await runInProcess([...words, flag]);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stderr).toBe("");
      expect(r.stdout).toMatch(new RegExp(`^usage: rollgym ${words.join(" ")}`));
      // Each flag of the command is listed with its help text.
      expect(r.stdout).toMatch(/--\w/);
    }
  });

  it("lists every flag of a command with its help text", async () => {
    const r = await runInProcess(["rollout", "--help"]);
    for (const flag of ["--config FILE", "--plugin MODULE", "--out FILE", "--seed N", "--llm URL", "--json"])
      expect(r.stdout).toContain(flag);
    expect(r.stdout).toContain("(repeatable)");
    expect((await runInProcess(["envs", "sample", "SimpleSokoban", "-h"])).stdout).toContain("--seeds A..B");
  });

  it("`rollgym help`, `rollgym --help` and `rollgym help rollout` print on stdout", async () => {
    for (const argv of [["help"], ["--help"], ["-h"]]) {
      const r = await runInProcess(argv);
      expect(r.code).toBe(0);
      for (const name of ["envs sample", "rollout", "serve", "show"]) expect(r.stdout).toContain(name);
    }
    const one = await runInProcess(["help", "rollout"]);
    expect(one.stdout).toMatch(/^usage: rollgym rollout/);
    const group = await runInProcess(["help", "envs"]);
    expect(group.stdout).toMatch(/^usage: rollgym envs <subcommand>/);
  });

  it("`rollgym` and `rollgym envs` alone print the usage on stderr and exit 2", async () => {
    for (const argv of [[], ["envs"]]) {
      const r = await rollgym(argv);
      expect(r.code).toBe(2);
      expect(r.stdout).toBe("");
      expect(r.stderr).toMatch(/^usage: rollgym/);
      expect(r.stderr).not.toMatch(/\bat .*:\d+:\d+/);
    }
    expect((await runInProcess(["envs"])).stderr).toContain("rollgym envs sample");
  });

  it("keeps the one-line contract for unknown commands and options, and -h is never a tag", async () => {
    expectUsageError(await runInProcess(["envs", "frobnicate"]), ["unknown command", "envs sample"]);
    expectUsageError(await runInProcess(["frobnicate"]), ["unknown command", "rollout"]);
    expectUsageError(await runInProcess(["help", "frobnicate"]), ["unknown command"]);
    expectUsageError(await runInProcess(["envs", "sample", "-x", "--seeds", "1"]), ["-x", "--seeds"]);
    const h = await runInProcess(["envs", "sample", "-h", "--seeds", "1"]);
    expect(h.code).toBe(0);
    expect(h.stdout).toMatch(/^usage:/);
  });

  it("--config repeats, later files winning", async () => {
    const { mkdtempSync, writeFileSync } = await import("node:fs");
    const { join } = await import("node:path");
    const { tmpdir } = await import("node:os");
    const dir = mkdtempSync(join(tmpdir(), "rollgym-help-"));
    const a = join(dir, "a.yaml");
    const b = join(dir, "b.yaml");
    writeFileSync(
      a,
      "es_manager:\n  val:\n    env_groups: 3\n    env_configs: {tags: [Bandit], n_groups: [3]}\n",
    );
    writeFileSync(b, "es_manager:\n  val:\n    group_size: 2\n");
    const r = await runInProcess(["rollout", "--mode", "val", "--config", a, "--config", b, "--json"]);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ episodes: 6 });
    const c = join(dir, "c.yaml");
    writeFileSync(c, "es_manager:\n  val:\n    group_size: 1\n");
    const later = await runInProcess([
      "rollout",
      "--mode",
      "val",
      "--config",
      a,
      "--config",
      b,
      "--config",
      c,
      "--json",
    ]);
    expect(JSON.parse(later.stdout)).toMatchObject({ episodes: 3 });
  });
});
