// `rollgym serve` runs with its memory settings (src/cli/runtime.ts): started without them it
// re-executes itself in place (same PID), keeps any setting the user gave, and ROLLGYM_RUNTIME=as-is
// leaves the process as started. With jemalloc on the machine (Debian: libjemalloc2) it is preloaded.

import type { ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import {
  findJemalloc,
  JEMALLOC_PATHS,
  missingServeSettings,
  SERVE_MALLOC_ENV,
  SERVE_NODE_FLAGS,
} from "../../src/cli/runtime.ts";
import { spawnServe } from "../helpers/cli.ts";

const children: ChildProcess[] = [];
afterEach(() => {
  for (const child of children.splice(0)) child.kill("SIGKILL");
});

/** `rollgym serve` with `env` added to an environment without any serve setting of its own. */
async function serve(env: NodeJS.ProcessEnv): Promise<{ pid: number; url: string }> {
  const clean = { ...process.env };
  for (const name of [...Object.keys(SERVE_MALLOC_ENV), "LD_PRELOAD", "NODE_OPTIONS", "ROLLGYM_RUNTIME"])
    delete clean[name];
  const { url, child } = await spawnServe([], { ...clean, ...env });
  children.push(child);
  return { pid: child.pid!, url };
}

const argvOf = (pid: number) => readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
const mapsOf = (pid: number) => readFileSync(`/proc/${pid}/maps`, "utf8");
const envOf = (pid: number) =>
  Object.fromEntries(
    readFileSync(`/proc/${pid}/environ`, "utf8")
      .split("\0")
      .filter(Boolean)
      .map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]),
  );

describe("serve's memory settings", () => {
  it("names what a process lacks, keeping what the user set", () => {
    const jemalloc = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";
    const allFlags = ["--max-semi-space-size=8", "--memory-saver-mode", "--heap-growing-percent=50"];
    // With jemalloc on the machine it is preloaded, and glibc's thresholds are not needed.
    expect(missingServeSettings({}, [], jemalloc)).toEqual({
      env: { LD_PRELOAD: jemalloc },
      flags: SERVE_NODE_FLAGS,
    });
    // Without it (or with the user's own LD_PRELOAD, even empty), glibc gets the thresholds.
    expect(missingServeSettings({}, [], null)).toEqual({ env: SERVE_MALLOC_ENV, flags: SERVE_NODE_FLAGS });
    expect(missingServeSettings({ LD_PRELOAD: "" }, [], jemalloc).env).toEqual(SERVE_MALLOC_ENV);
    expect(missingServeSettings({ LD_PRELOAD: jemalloc }, allFlags, jemalloc)).toEqual({
      env: {},
      flags: [],
    });
    const mine = missingServeSettings(
      { MALLOC_MMAP_THRESHOLD_: "65536", NODE_OPTIONS: "--max-semi-space-size=64" },
      [],
      null,
    );
    expect(mine).toEqual({
      env: { MALLOC_TRIM_THRESHOLD_: "131072" },
      flags: ["--memory-saver-mode", "--heap-growing-percent=200"],
    });
    // A boolean V8 flag the user turned off stays off, and so does the growing percent that
    // only tempers it: what is left is the earlier settings (V8's adaptive heap growth).
    expect(missingServeSettings({}, ["--no-memory-saver-mode"], null).flags).toEqual([
      "--max-semi-space-size=16",
    ]);
    expect(missingServeSettings({ ...SERVE_MALLOC_ENV }, allFlags, null)).toEqual({
      env: {},
      flags: [],
    });
  });

  it("finds jemalloc where distributions install it", () => {
    expect(findJemalloc(() => false)).toBeNull();
    expect(findJemalloc((path) => path === "/usr/lib64/libjemalloc.so.2")).toBe(
      "/usr/lib64/libjemalloc.so.2",
    );
    expect(JEMALLOC_PATHS.every((path) => path.endsWith("/libjemalloc.so.2"))).toBe(true);
  });

  it("re-executes serve in place with them: same PID, the flags and the allocator", async () => {
    const { pid, url } = await serve({});
    expect(argvOf(pid)).toEqual(expect.arrayContaining([...SERVE_NODE_FLAGS]));
    const jemalloc = findJemalloc();
    if (jemalloc) {
      // .ci/run installs Debian's libjemalloc2, so CI takes this branch.
      expect(envOf(pid).LD_PRELOAD).toBe(jemalloc);
      expect(mapsOf(pid)).toContain("libjemalloc.so.2");
    } else expect(envOf(pid)).toMatchObject(SERVE_MALLOC_ENV);
    // V8 took the flags (an unknown one would have stopped node before it listened).
    expect((await fetch(`${url}/healthz`)).ok).toBe(true);
  });

  it("keeps the user's own value, and ROLLGYM_RUNTIME=as-is changes nothing", async () => {
    // The user's own (empty) LD_PRELOAD keeps glibc, which then gets the missing threshold.
    const own = await serve({ LD_PRELOAD: "", MALLOC_MMAP_THRESHOLD_: "65536" });
    expect(envOf(own.pid)).toMatchObject({
      LD_PRELOAD: "",
      MALLOC_MMAP_THRESHOLD_: "65536",
      MALLOC_TRIM_THRESHOLD_: "131072",
    });
    expect(mapsOf(own.pid)).not.toContain("libjemalloc");
    const asIs = await serve({ ROLLGYM_RUNTIME: "as-is" });
    expect(argvOf(asIs.pid)).not.toContain("--max-semi-space-size=16");
    expect(envOf(asIs.pid).MALLOC_MMAP_THRESHOLD_).toBeUndefined();
    expect(envOf(asIs.pid).LD_PRELOAD).toBeUndefined();
  });
});
