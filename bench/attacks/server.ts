// A `rollgym serve` child process for the attack bench and the soak: its own process, so the RSS
// read from /proc/PID/status is the server's alone (the attacking clients live elsewhere).
import { type ChildProcess, fork, spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { cpuSeconds, memoryOf, servingUrl } from "../../src/bench/children.ts";
import { type ProbeReport, probeReport } from "./probe-report.ts";

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const MiB = 1024 * 1024;

export interface ServeChild {
  url: string;
  child: ChildProcess;
  pid: number;
  /** Resident set size now (VmRSS), bytes; NaN once the process is gone. */
  rss(): number;
  /** Peak resident set size so far (VmHWM), bytes; NaN once the process is gone. */
  hwm(): number;
  /** CPU seconds the process has used (user + system), from /proc/PID/stat; NaN once gone. */
  cpuSeconds(): number;
  alive(): boolean;
  /**
   * SIGTERM (unless `signal` is false: the caller has signalled), then SIGKILL after `graceMs`;
   * resolves when the process has exited.
   */
  stop(graceMs?: number, signal?: boolean): Promise<{ code: number | null; signal: string | null }>;
  /** The server's stderr so far (its warnings and errors). */
  stderr(): string;
}

/**
 * Starts `node src/cli/main.ts serve --port 0 ARGS…` (the same process `npx rollgym serve` runs)
 * and resolves once it prints its URL.
 */
export async function startServe(
  args: readonly string[] = [],
  env: NodeJS.ProcessEnv = {},
): Promise<ServeChild> {
  const child = spawn(process.execPath, ["src/cli/main.ts", "serve", "--port", "0", ...args], {
    cwd: ROOT,
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, ROLLGYM_LOG_LEVEL: "error", ...env },
  });
  let err = "";
  child.stderr!.setEncoding("utf8").on("data", (d: string) => {
    err = (err + d).slice(-20_000);
  });
  let exited: { code: number | null; signal: string | null } | null = null;
  const exit = new Promise<{ code: number | null; signal: string | null }>((resolve) =>
    child.once("exit", (code, signal) => {
      exited = { code, signal };
      resolve(exited);
    }),
  );
  const url = await servingUrl(child.stdout!);
  if (!url) throw new Error(`rollgym serve exited before listening: ${err}`);
  child.stdout!.resume();
  const pid = child.pid!;
  return {
    url,
    child,
    pid,
    rss: () => memoryOf(pid)?.rss ?? Number.NaN,
    hwm: () => memoryOf(pid)?.peak ?? Number.NaN,
    cpuSeconds: () => cpuSeconds(pid) ?? Number.NaN,
    alive: () => exited === null,
    stderr: () => err,
    async stop(graceMs = 10_000, signal = true) {
      if (exited) return exited;
      if (signal) child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
      const result = await exit;
      clearTimeout(timer);
      return result;
    },
  };
}

/** Runs `fn` every `ms` until the returned function is called. */
export function every(ms: number, fn: () => void): () => void {
  const timer = setInterval(fn, ms);
  return () => clearInterval(timer);
}

/** Starts the bystander process (bench/attacks/prober.ts) against `url`. */
export function startProber(url: string, token?: string): { stop(): Promise<ProbeReport> } {
  const child = fork(join(ROOT, "bench/attacks/prober.ts"), [url, token ?? ""], {
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  const report = new Promise<ProbeReport>((resolve) => {
    child.once("message", (m) => resolve(m as ProbeReport));
    child.once("exit", () => resolve(probeReport(Number.NaN, "prober exited")));
  });
  return {
    async stop() {
      child.send("stop");
      const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
      const r = await report;
      clearTimeout(timer);
      return r;
    },
  };
}
