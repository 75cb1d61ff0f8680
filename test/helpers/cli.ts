// Runs the CLI the way users do: `npx rollgym …` from the repo root (pinned Node 24).
import { type ChildProcess, spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { servingUrl } from "../../src/bench/children.ts";

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export function rollgym(args: readonly string[], stdin = ""): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn("npx", ["rollgym", ...args], { cwd: ROOT, stdio: ["pipe", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
    child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
    child.stdin.end(stdin);
  });
}

export function jsonLines(text: string): Record<string, unknown>[] {
  return text
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** The shape every usage error must have: one line on stderr, exit 2, nothing on stdout. */
export function expectUsageError(result: CliResult, mentions: readonly string[], code = 2): void {
  const problems: string[] = [];
  if (result.code !== code) problems.push(`exit code ${result.code}, want ${code}`);
  if (result.stdout !== "") problems.push(`stdout not empty: ${JSON.stringify(result.stdout)}`);
  const lines = result.stderr.split("\n").filter((l) => l !== "");
  if (lines.length !== 1)
    problems.push(`stderr has ${lines.length} lines, want 1: ${JSON.stringify(result.stderr)}`);
  if (/\bat .*:\d+:\d+/.test(result.stderr)) problems.push("stderr contains a stack trace");
  for (const word of mentions)
    if (!result.stderr.includes(word)) problems.push(`stderr does not mention ${word}`);
  if (problems.length) throw new Error(`${problems.join("; ")}\nstderr: ${result.stderr}`);
}

/**
 * `rollgym serve` in its own process on a free port, with `env` as its whole environment
 * (default: this one's); resolves once it prints its URL.
 */
export async function spawnServe(
  args: readonly string[] = [],
  env: NodeJS.ProcessEnv = process.env,
): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, ["src/cli/main.ts", "serve", "--port", "0", ...args], {
    cwd: ROOT,
    env,
    stdio: ["ignore", "pipe", "inherit"],
  });
  const url = await servingUrl(child.stdout!);
  if (!url) throw new Error("rollgym serve exited before listening");
  return { url, child };
}

/** Serves with `args` and `env`, runs `check` against its URL, then stops the server. */
export async function serving(
  args: readonly string[],
  env: NodeJS.ProcessEnv,
  check: (url: string) => Promise<void>,
): Promise<void> {
  const { url, child } = await spawnServe(args, env);
  try {
    await check(url);
  } finally {
    child.kill("SIGTERM");
  }
}
