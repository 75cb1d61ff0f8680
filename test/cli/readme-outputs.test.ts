// The README's claims about what each command prints on stdout, checked by running each one:
// JSON lines, one JSON object, text for people, the exported artefact, or a URL line.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ROOT } from "../helpers/cli.ts";
import { writeEpisodes } from "../web/fixtures.ts";
import { runInProcess } from "./in-process.ts";

type Kind = "json lines" | "one json object" | "text" | "html" | "svg";

const dir = mkdtempSync(join(tmpdir(), "rollgym-readme-"));
const file = join(dir, "run.jsonl");
const ROLLOUT = ["rollout", "--tag", "Bandit", "--groups", "2", "--group-size", "2"];

/** Each command the README's table lists, run as a user would, and what its stdout must be. */
const CASES: { command: string; argv: string[]; stdin?: string; kind: Kind }[] = [
  { command: "envs list", argv: ["envs", "list"], kind: "json lines" },
  { command: "envs sample", argv: ["envs", "sample", "Bandit", "--seeds", "1..3"], kind: "json lines" },
  {
    command: "envs play",
    argv: ["envs", "play", "SimpleSokoban", "--seed", "1", "--actions", "Up,Left"],
    kind: "json lines",
  },
  { command: "envs prompt", argv: ["envs", "prompt", "Bandit", "--seed", "1"], kind: "json lines" },
  { command: "envs check", argv: ["envs", "check", "Bandit"], kind: "json lines" },
  {
    command: "parse",
    argv: ["parse", "SimpleSokoban"],
    stdin: "I push.</think><answer>Up</answer>",
    kind: "json lines",
  },
  { command: "filter", argv: ["filter"], stdin: "[[1,2],[3,3]]", kind: "json lines" },
  { command: "rollout", argv: ROLLOUT, kind: "text" },
  { command: "rollout --json", argv: [...ROLLOUT, "--json"], kind: "one json object" },
  { command: "show", argv: ["show", file], kind: "text" },
  { command: "export", argv: ["export", file], kind: "html" },
  { command: "export --format svg", argv: ["export", file, "--format", "svg"], kind: "svg" },
  {
    command: "export --out",
    argv: ["export", file, "--out", join(dir, "run.html")],
    kind: "one json object",
  },
  { command: "demo", argv: ["demo", "--tag", "Bandit"], kind: "text" },
  {
    command: "sft",
    argv: ["sft", "--tag", "Bandit", "--groups", "1", "--out", join(dir, "sft.jsonl")],
    kind: "one json object",
  },
];

function isJson(line: string): boolean {
  try {
    const value = JSON.parse(line);
    return typeof value === "object" && value !== null;
  } catch {
    return false;
  }
}

function expectKind(stdout: string, kind: Kind, what: string): void {
  const lines = stdout.split("\n").filter((l) => l !== "");
  expect(lines.length, `${what} printed nothing`).toBeGreaterThan(0);
  if (kind === "json lines")
    expect(
      lines.filter((l) => !isJson(l)),
      what,
    ).toEqual([]);
  else if (kind === "one json object") expect(lines.length === 1 && isJson(lines[0]), what).toBe(true);
  else if (kind === "html") expect(stdout, what).toMatch(/^<!doctype html>/);
  else if (kind === "svg") expect(stdout, what).toMatch(/^<svg /);
  else
    expect(
      lines.some((l) => !isJson(l)),
      `${what} prints text for people`,
    ).toBe(true);
}

beforeAll(async () => {
  await writeEpisodes(file, [{ tag: "SimpleSokoban", groups: 2 }], 2);
});

// What each command printed before the edge was restructured (issue #21: CLI outputs
// identical). Re-record only for a change that is meant and listed:
// RECORD_TRANSCRIPT=1 npx vitest run test/cli/readme-outputs.test.ts
const OUTPUTS = new URL("../fixtures/transcript/readme-outputs.json", import.meta.url);
const recording = process.env.RECORD_TRANSCRIPT === "1" || !existsSync(OUTPUTS);
const recorded: Record<string, string> = recording ? {} : JSON.parse(readFileSync(OUTPUTS, "utf8"));
afterAll(() => {
  if (recording) writeFileSync(OUTPUTS, `${JSON.stringify(recorded, null, 1)}\n`);
});

/** Stdout without what changes from run to run: the temporary directory and the timing figures. */
function steady(stdout: string): string {
  return stdout.replaceAll(dir, "<dir>").replace(/"timing":\{[^}]*\}/g, '"timing":{}');
}

describe("the README's output formats", () => {
  it("every command in the README's table is checked here", () => {
    const readme = readFileSync(join(ROOT, "README.md"), "utf8");
    const listed = [...readme.matchAll(/^\| `rollgym ((?:envs )?[a-z-]+)/gm)].map((m) => m[1]);
    const checked = new Set([
      ...CASES.map((c) => c.command.split(" --")[0]),
      "serve",
      "mock-engine",
      "bench",
    ]);
    expect(listed.length).toBeGreaterThan(10);
    expect(listed.filter((c) => !checked.has(c))).toEqual([]);
    // bench's formats are checked in test/bench/bench.test.ts (it starts engines and a server).
    expect(readme).toContain("`bench --json` prints indented JSON");
  });

  it.concurrent.each(CASES)("$command prints $kind", async ({ argv, stdin, kind, command }) => {
    const r = await runInProcess(argv, stdin);
    expect(r.code, r.stderr).toBe(0);
    expectKind(r.stdout, kind, command);
    if (recording) recorded[command] = steady(r.stdout);
    else expect(steady(r.stdout), `${command} prints what it printed before`).toBe(recorded[command]);
  });

  it.concurrent.each([["serve"], ["mock-engine"]])(
    "%s prints one line with its URL on stdout",
    async (command) => {
      const child = spawn(process.execPath, ["src/cli/main.ts", command, "--port", "0"], {
        cwd: ROOT,
        stdio: ["ignore", "pipe", "pipe"],
      });
      let stdout = "";
      child.stdout.setEncoding("utf8");
      for await (const chunk of child.stdout) {
        stdout += chunk;
        if (stdout.includes("\n")) break;
      }
      child.kill("SIGTERM");
      await new Promise((resolve) => child.on("close", resolve));
      expect(stdout).toMatch(/^[^\n]* http:\/\/127\.0\.0\.1:\d+\S* [^\n]*\n$/);
    },
  );
});
