// The serve process's memory settings (docs/server.md "Memory over time"). A long-running server
// under mixed load otherwise keeps every peak: glibc's main heap fragments under Node's mix of
// short- and long-lived buffers and only shrinks from the top, and V8 keeps the pages it frees
// in a pool until a memory-reducing GC, which it runs only when the allocation rate is low
// (never, on a busy server). So serve preloads jemalloc when the machine has it (it gives freed
// memory back within seconds; else glibc gets fixed thresholds) and makes V8's full GCs
// memory-reducing. Figures in bench/RESULTS.md "Soak".
import { existsSync } from "node:fs";

/** glibc malloc: large blocks always mmap'd, and free memory above 128 KiB given back at once. */
export const SERVE_MALLOC_ENV: Readonly<Record<string, string>> = {
  MALLOC_MMAP_THRESHOLD_: "131072",
  MALLOC_TRIM_THRESHOLD_: "131072",
};

/**
 * V8: a 16 MiB semi-space (32 MiB young generation) instead of growing to 64 MiB; every full GC
 * memory-reducing, so freed pages go back to the kernel; and the old generation still allowed
 * to grow 3× past what survived before the next full GC (memory-saver mode alone grows it only
 * 1.1×, which cost 2.8× the CPU per request).
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

/** Set ROLLGYM_RUNTIME=as-is to run serve with whatever settings the process was started with. */
const OPT_OUT = "as-is";

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
  const given = [...execArgv, ...(env.NODE_OPTIONS ?? "").split(/\s+/)];
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

/**
 * Re-executes this process in place with the serve settings it lacks (same PID, so npm, npx and
 * process managers see the same server and signals reach it as before). Returns only when
 * nothing is missing, the user opted out, or the platform cannot exec in place.
 */
export function ensureServeRuntime(): void {
  if (process.env.ROLLGYM_RUNTIME === OPT_OUT) return;
  if (process.platform !== "linux" || typeof process.execve !== "function") return;
  const missing = missingServeSettings();
  if (Object.keys(missing.env).length === 0 && missing.flags.length === 0) return;
  process.execve(
    process.execPath,
    [process.execPath, ...missing.flags, ...process.execArgv, ...process.argv.slice(1)],
    { ...process.env, ...missing.env },
  );
}
