// The serve process's memory settings (docs/server.md "Memory over time"). A long-running server
// under mixed load otherwise keeps every peak: glibc raises its mmap threshold after each large
// frame it frees (so later large frames land in, and fragment, the main heap), and V8 keeps a
// 64 MiB young generation's pages and its old-space pages for reuse. With these settings the
// 10-minute soak (bench/soak.ts) sits about 75 MiB lower and grows a fraction as fast
// (bench/RESULTS.md "Soak"), for up to 18% more server CPU per request ("rollgym bench").

/** glibc malloc: large blocks always mmap'd, and free memory above 128 KiB given back at once. */
export const SERVE_MALLOC_ENV: Readonly<Record<string, string>> = {
  MALLOC_MMAP_THRESHOLD_: "131072",
  MALLOC_TRIM_THRESHOLD_: "131072",
};

/** V8: a 16 MiB semi-space (32 MiB young generation) instead of growing to 64 MiB. */
export const SERVE_NODE_FLAGS: readonly string[] = ["--max-semi-space-size=16"];

/** Set ROLLGYM_RUNTIME=as-is to run serve with whatever settings the process was started with. */
const OPT_OUT = "as-is";

/**
 * What the current process lacks of the serve settings (a setting the user gave, in the
 * environment, NODE_OPTIONS or node's own flags, counts as present and is kept).
 */
export function missingServeSettings(
  env: NodeJS.ProcessEnv = process.env,
  execArgv: readonly string[] = process.execArgv,
): { env: Record<string, string>; flags: string[] } {
  const given = [...execArgv, ...(env.NODE_OPTIONS ?? "").split(/\s+/)];
  return {
    env: Object.fromEntries(Object.entries(SERVE_MALLOC_ENV).filter(([name]) => env[name] === undefined)),
    flags: SERVE_NODE_FLAGS.filter((flag) => {
      const name = flag.split("=")[0];
      return !given.some((arg) => arg === name || arg.startsWith(`${name}=`));
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
