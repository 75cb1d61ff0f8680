// The serve process's memory settings, an opt-in (docs/server.md "Memory over time"). A
// long-running server under mixed load otherwise keeps every peak: glibc's main heap fragments
// under Node's mix of short- and long-lived buffers and only shrinks from the top, and V8 keeps
// the pages it frees in a pool until a memory-reducing GC, which it runs only when the
// allocation rate is low (never, on a busy server). The tuned runtime preloads jemalloc when the
// machine has it (it gives freed memory back within seconds; else glibc gets fixed thresholds)
// and makes V8's full GCs memory-reducing. Figures in bench/RESULTS.md "Soak".
//
// The process is the operator's: serve runs as started unless asked (`--tuned-runtime` or
// ROLLGYM_RUNTIME=tuned), and even then it never re-executes a process that something else holds
// on to (an IPC channel, a cluster primary, a debugger). `serve --print-runtime` gives the same
// settings as lines for a Dockerfile or a systemd unit, which need no re-execution at all.
import cluster from "node:cluster";
import { existsSync, realpathSync } from "node:fs";
import inspector from "node:inspector";
import { UsageError } from "./args.ts";
import { say } from "./io.ts";

/** glibc malloc: large blocks always mmap'd, and free memory above 128 KiB given back at once. */
export const SERVE_MALLOC_ENV: Readonly<Record<string, string>> = {
  MALLOC_MMAP_THRESHOLD_: "131072",
  MALLOC_TRIM_THRESHOLD_: "131072",
};

/**
 * V8: a 16 MiB semi-space (32 MiB young generation) instead of growing to 64 MiB; every full GC
 * memory-reducing, so freed pages go back to the kernel; and the old generation still allowed
 * to grow 3× past what survived before the next full GC (memory-saver mode alone grows it only
 * 1.1×, which cost 2.8× the CPU per request). Node takes the last two only on its command line,
 * not in NODE_OPTIONS.
 */
export const SERVE_NODE_FLAGS: readonly string[] = [
  "--max-semi-space-size=16",
  "--memory-saver-mode",
  "--heap-growing-percent=200",
];

/** The growing percent only tempers memory-saver mode: a user who turns that off gets neither. */
const PART_OF: Readonly<Record<string, string>> = { "--heap-growing-percent": "--memory-saver-mode" };

/** Where distributions install jemalloc's shared library (Debian's `libjemalloc2` first). */
const MULTIARCH: Partial<Record<NodeJS.Architecture, string>> = {
  x64: "x86_64-linux-gnu",
  arm64: "aarch64-linux-gnu",
};
export const JEMALLOC_PATHS: readonly string[] = [
  ...(MULTIARCH[process.arch] ? [`/usr/lib/${MULTIARCH[process.arch]}/libjemalloc.so.2`] : []),
  "/usr/lib64/libjemalloc.so.2",
  "/usr/lib/libjemalloc.so.2",
  "/usr/local/lib/libjemalloc.so.2",
];

/** The first jemalloc library on this machine, or null. */
export function findJemalloc(exists: (path: string) => boolean = existsSync): string | null {
  return JEMALLOC_PATHS.find((path) => exists(path)) ?? null;
}

/** The environment variable that asks for the tuned runtime, and its values. */
export const RUNTIME_VARIABLE = "ROLLGYM_RUNTIME";
const RUNTIMES = {
  tuned: "serve's measured memory settings, applied by re-executing in place",
  "as-is": "the default: the process as it was started",
} as const;

/** Whether the tuned runtime was asked for: `--tuned-runtime`, or ROLLGYM_RUNTIME=tuned. */
export function tunedRuntimeAsked(flag: boolean, env: NodeJS.ProcessEnv = process.env): boolean {
  const value = env[RUNTIME_VARIABLE];
  if (value === undefined || value === "" || value === "as-is") return flag;
  if (value === "tuned") return true;
  const allowed = Object.entries(RUNTIMES).map(([name, what]) => `${name} (${what})`);
  throw new UsageError(
    `${RUNTIME_VARIABLE}: ${JSON.stringify(value)} is not a runtime; allowed: ${allowed.join(", ")}`,
  );
}

/**
 * What the current process lacks of the serve settings: jemalloc preloaded when the machine has
 * it (else the glibc thresholds), and the V8 flags. A setting the user gave (LD_PRELOAD, even
 * empty, a MALLOC_ variable, NODE_OPTIONS or node's own flags) counts as present and is kept.
 */
export function missingServeSettings(
  env: NodeJS.ProcessEnv = process.env,
  execArgv: readonly string[] = process.execArgv,
  jemalloc: string | null = findJemalloc(),
): { env: Record<string, string>; flags: string[] } {
  const missingEnv: Record<string, string> = {};
  if (env.LD_PRELOAD === undefined && jemalloc) missingEnv.LD_PRELOAD = jemalloc;
  const preload = env.LD_PRELOAD ?? missingEnv.LD_PRELOAD ?? "";
  if (!preload.includes("jemalloc"))
    for (const [name, value] of Object.entries(SERVE_MALLOC_ENV))
      if (env[name] === undefined) missingEnv[name] = value;
  const given = nodeFlags(env, execArgv);
  const has = (name: string) => given.some((arg) => arg === name || arg.startsWith(`${name}=`));
  const turnedOff = (name: string | undefined) => name !== undefined && has(name.replace(/^--/, "--no-"));
  return {
    env: missingEnv,
    flags: SERVE_NODE_FLAGS.filter((flag) => {
      const name = flag.split("=")[0];
      return !has(name) && !turnedOff(name) && !turnedOff(PART_OF[name]);
    }),
  };
}

/** Node's own flags, from its command line and NODE_OPTIONS. */
function nodeFlags(env: NodeJS.ProcessEnv, execArgv: readonly string[]): string[] {
  return [...execArgv, ...(env.NODE_OPTIONS ?? "").split(/\s+/).filter(Boolean)];
}

/** What a re-execution would break, looked at in one place (tests pass their own). */
export interface ProcessSituation {
  platform: NodeJS.Platform;
  canExecve: boolean;
  /** An IPC channel to the parent (child_process.fork, PM2's fork mode, `node --watch`). */
  ipc: boolean;
  clusterWorker: boolean;
  /** The URL of an active inspector, if any. */
  inspectorUrl: string | undefined;
  execArgv: readonly string[];
  env: NodeJS.ProcessEnv;
}

function currentSituation(): ProcessSituation {
  return {
    platform: process.platform,
    canExecve: typeof process.execve === "function",
    ipc: typeof process.send === "function" || process.env.NODE_CHANNEL_FD !== undefined,
    clusterWorker: cluster.isWorker,
    inspectorUrl: inspector.url(),
    execArgv: process.execArgv,
    env: process.env,
  };
}

const INSPECT_FLAG = /^--inspect(-brk|-wait)?(=|$)/;

/**
 * Why this process must not be re-executed, or null when it may be. A re-execution replaces the
 * process image: an IPC channel closes (the parent sees a disconnect and never hears "ready"), a
 * cluster worker forgets its primary and binds the port itself, and an inspector an IDE attached
 * to is replaced by a new one.
 */
export function whyNotReexecute(s: ProcessSituation): string | null {
  if (s.clusterWorker) return "this is a cluster worker; re-executing would cut it off from its primary";
  if (s.ipc)
    return "this process has an IPC channel to its parent (child_process.fork, a process manager); re-executing would close it";
  const inspecting = nodeFlags(s.env, s.execArgv).find((flag) => INSPECT_FLAG.test(flag));
  if (s.inspectorUrl !== undefined || inspecting)
    return `an inspector is active (${s.inspectorUrl ?? inspecting}); re-executing would replace the debugger session`;
  if (s.platform !== "linux") return `re-executing in place needs Linux (this is ${s.platform})`;
  if (!s.canExecve) return "this Node has no process.execve";
  return null;
}

/**
 * The tuned runtime, asked for: re-executes this process in place (same PID, so npm, npx and
 * signals reach the same server) with the settings it lacks. Returns when nothing is missing,
 * or, having said why on stderr, when re-executing would break what started the process.
 */
export function applyTunedRuntime(): void {
  const situation = currentSituation();
  const missing = missingServeSettings(situation.env, situation.execArgv);
  if (Object.keys(missing.env).length === 0 && missing.flags.length === 0) return;
  const refused = whyNotReexecute(situation);
  if (refused !== null) {
    say(
      `tuned runtime not applied: ${refused}. Serving with the runtime as started; to tune it, start node with the settings (rollgym serve --print-runtime prints them)`,
    );
    return;
  }
  process.execve!(
    process.execPath,
    [process.execPath, ...missing.flags, ...situation.execArgv, ...process.argv.slice(1)],
    { ...situation.env, ...missing.env },
  );
}

/**
 * The tuned runtime as lines to paste (`serve --print-runtime`): a Dockerfile's ENV and CMD, a
 * systemd unit's Environment= and ExecStart=, and a shell command, for this machine's allocator,
 * this node and this install, running `serve` with `serveArgs`.
 */
export function runtimeLines(
  serveArgs: readonly string[],
  jemalloc: string | null = findJemalloc(),
  node: string = process.execPath,
  script: string = realpathSync(process.argv[1]),
): string {
  const env: Record<string, string> = jemalloc ? { LD_PRELOAD: jemalloc } : { ...SERVE_MALLOC_ENV };
  const argv = [node, ...SERVE_NODE_FLAGS, script, "serve", ...serveArgs];
  const assignments = (quote: (word: string) => string) =>
    Object.entries(env).map(([name, value]) => quote(`${name}=${value}`));
  return [
    `# rollgym serve's tuned runtime on this machine (docs/server.md "Memory over time").`,
    jemalloc
      ? `# jemalloc found at ${jemalloc}.`
      : "# No jemalloc found (Debian, Ubuntu: apt-get install libjemalloc2): glibc thresholds instead.",
    "# The V8 flags go on node's command line: NODE_OPTIONS accepts only --max-semi-space-size of them.",
    "",
    "# Dockerfile",
    `ENV ${assignments(shellWord).join(" ")}`,
    `CMD [${argv.map((word) => JSON.stringify(word)).join(", ")}]`,
    "",
    "# systemd unit, [Service] section",
    `Environment=${assignments(systemdWord).join(" ")}`,
    `ExecStart=${argv.map(systemdWord).join(" ")}`,
    "",
    "# shell",
    `${[...assignments(shellWord), ...argv.map(shellWord)].join(" ")}`,
    "",
  ].join("\n");
}

const PLAIN_WORD = /^[\w@%+=:,./-]+$/;

function shellWord(word: string): string {
  return PLAIN_WORD.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`;
}

/** systemd's own quoting: double quotes, backslash escapes, and `%` and `$` doubled. */
function systemdWord(word: string): string {
  const escaped = word.replaceAll("%", "%%").replaceAll("$", "$$$$");
  return PLAIN_WORD.test(word) ? escaped : `"${escaped.replaceAll("\\", "\\\\").replaceAll('"', '\\"')}"`;
}
