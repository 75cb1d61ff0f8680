// The processes a bench drives: `rollgym serve` and `rollgym mock-engine` children started
// through the CLI (so the bench measures exactly what users run), and what Linux says about
// them (/proc/PID/stat CPU time, /proc/PID/status memory).
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import type { Readable } from "node:stream";
import { fileURLToPath } from "node:url";

const ROLLGYM = fileURLToPath(new URL("../../bin/rollgym.js", import.meta.url));

/** The CLI entry of the checkout at `dir` (an A/B run's other tree). */
export function rollgymEntry(dir: string): string {
  return join(resolve(dir), "bin", "rollgym.js");
}

/**
 * Children still running: killed when this process exits, also by a crash or a SIGINT/SIGTERM,
 * so none is orphaned. A bench killed outright (SIGKILL) cannot: its children watch it instead
 * (ROLLGYM_EXIT_WITH_PARENT, src/cli/lifeline.ts) and stop within a second.
 */
const live = new Set<ChildProcess>();
let reaperInstalled = false;

function track(child: ChildProcess): void {
  live.add(child);
  child.once("exit", () => live.delete(child));
  if (reaperInstalled) return;
  reaperInstalled = true;
  process.once("exit", () => {
    for (const c of live) c.kill("SIGKILL");
  });
  // Node's default for these signals ends the process without its "exit" event.
  for (const [signal, status] of [
    ["SIGINT", 130],
    ["SIGTERM", 143],
  ] as const) {
    process.once(signal, () => process.exit(status));
  }
}

export interface Child {
  name: string;
  pid: number;
  /** The base URL the child printed when it started listening. */
  url: string;
  /** Sends SIGTERM and waits for the exit (SIGKILL after `graceMs`). */
  stop(graceMs?: number): Promise<void>;
}

/**
 * Starts `rollgym ARGS` and resolves once a stdout line matches `listening` (its first group is
 * the URL; the match should run to the line's end). Rejects with the child's stderr if it exits first.
 * `entry` is the CLI to run: this checkout's unless given.
 */
export function startRollgym(
  name: string,
  args: readonly string[],
  listening: RegExp,
  entry: string = ROLLGYM,
): Promise<Child> {
  const child = spawn(process.execPath, [entry, ...args], {
    stdio: ["ignore", "pipe", "pipe"],
    env: {
      ...process.env,
      ROLLGYM_LOG_LEVEL: process.env.ROLLGYM_LOG_LEVEL ?? "error",
      ROLLGYM_EXIT_WITH_PARENT: "1",
    },
  });
  track(child);
  let stderr = "";
  child.stderr?.setEncoding("utf8");
  child.stderr?.on("data", (text: string) => {
    // Keep the tail only: a long run's warnings must not grow without bound.
    stderr = (stderr + text).slice(-4000);
  });
  return new Promise((resolve, reject) => {
    let stdout = "";
    const onExit = (code: number | null, signal: string | null) =>
      reject(
        new Error(
          `${name} exited before it listened (${signal ?? `status ${code}`}): ${stderr.trim() || stdout.trim()}`,
        ),
      );
    child.once("exit", onExit);
    child.once("error", reject);
    child.stdout?.setEncoding("utf8");
    child.stdout?.on("data", (text: string) => {
      stdout += text;
      const match = listening.exec(stdout);
      if (!match) return;
      child.off("exit", onExit);
      child.stdout?.removeAllListeners("data");
      child.stdout?.resume();
      resolve({
        name,
        pid: child.pid ?? 0,
        url: match[1],
        stop: (graceMs) => stopChild(child, graceMs),
      });
    });
  });
}

/** The URL `rollgym serve` prints once it listens, read from its stdout; "" if it ends first. */
export async function servingUrl(stdout: Readable): Promise<string> {
  for await (const line of createInterface({ input: stdout })) {
    const match = /serving on (http:\/\/\S+)/.exec(line);
    if (match) return match[1];
  }
  return "";
}

/**
 * Starts `count` mock engines (`rollgym mock-engine`, engine i seeded i) serving `model` with the
 * extra flags `args`. If one fails, those that started are stopped and the failure is thrown.
 */
export async function startMockEngines(
  count: number,
  model: string,
  args: readonly string[],
): Promise<Child[]> {
  const launched = await Promise.allSettled(
    Array.from({ length: count }, (_, i) =>
      startRollgym(
        `mock engine ${i + 1}`,
        ["mock-engine", "--port", "0", "--model", model, "--seed", String(i), ...args],
        /mock engine listening on (\S+).*\n/,
      ),
    ),
  );
  const engines = launched.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
  const failure = launched.find((r) => r.status === "rejected");
  if (failure) {
    await Promise.all(engines.map((e) => e.stop()));
    throw failure.reason;
  }
  return engines;
}

/**
 * Starts `rollgym serve` against `urls` serving `model`, playing `groupConcurrency` groups of a
 * rollout at once, with the extra arguments `args` (flags, key=value overrides), from the CLI
 * `entry` (this checkout's unless given).
 */
export function startServe(
  urls: readonly string[],
  model: string,
  groupConcurrency: number,
  args: readonly string[],
  entry?: string,
): Promise<Child> {
  return startRollgym(
    "rollgym serve",
    [
      "serve",
      "--port",
      "0",
      "--llm",
      urls.join(","),
      "--model",
      model,
      "--group-concurrency",
      String(groupConcurrency),
      ...args,
    ],
    /rollgym serving on (\S+).*\n/,
    entry,
  );
}

/** Stops every child, the server first, so it never sees its engines vanish mid-request. */
export async function stopAll(children: readonly Child[]): Promise<void> {
  const server = children.find((c) => c.name === "rollgym serve");
  await server?.stop();
  await Promise.all(children.filter((c) => c !== server).map((c) => c.stop()));
}

function stopChild(child: ChildProcess, graceMs = 10_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
    child.once("exit", () => {
      clearTimeout(timer);
      resolve();
    });
    child.kill("SIGTERM");
  });
}

let ticksPerSecond: number | null = null;

/** The kernel's clock ticks per second (the unit of /proc/PID/stat times); 100 on Linux. */
function clockTicks(): number {
  if (ticksPerSecond === null) {
    try {
      ticksPerSecond = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100;
    } catch {
      ticksPerSecond = 100;
    }
  }
  return ticksPerSecond;
}

/** User + system CPU seconds a process has used (not wall time), or null if it is not readable. */
export function cpuSeconds(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The command name may hold spaces and parentheses: fields start after the last ")".
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    return (Number(fields[11]) + Number(fields[12])) / clockTicks();
  } catch {
    return null;
  }
}

export interface Memory {
  /** Resident set size now, bytes. */
  rss: number;
  /** The peak resident set size (VmHWM), bytes. */
  peak: number;
}

export function memoryOf(pid: number): Memory | null {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const kib = (field: string) =>
      Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? NaN);
    return { rss: kib("VmRSS") * 1024, peak: kib("VmHWM") * 1024 };
  } catch {
    return null;
  }
}
