// `rollgym serve` runs with its memory settings (src/cli/runtime.ts): started without them it
// re-executes itself in place (same PID), keeps any setting the user gave, and ROLLGYM_RUNTIME=as-is
// leaves the process as started.

import type { ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { missingServeSettings, SERVE_MALLOC_ENV, SERVE_NODE_FLAGS } from "../../src/cli/runtime.ts";
import { spawnServe } from "../helpers/cli.ts";

const children: ChildProcess[] = [];
afterEach(() => {
  for (const child of children.splice(0)) child.kill("SIGKILL");
});

/** `rollgym serve` with `env` added to an environment without any serve setting of its own. */
async function serve(env: NodeJS.ProcessEnv): Promise<{ pid: number; url: string }> {
  const clean = { ...process.env };
  for (const name of [...Object.keys(SERVE_MALLOC_ENV), "NODE_OPTIONS", "ROLLGYM_RUNTIME"])
    delete clean[name];
  const { url, child } = await spawnServe([], { ...clean, ...env });
  children.push(child);
  return { pid: child.pid!, url };
}

const argvOf = (pid: number) => readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
const envOf = (pid: number) =>
  Object.fromEntries(
    readFileSync(`/proc/${pid}/environ`, "utf8")
      .split("\0")
      .filter(Boolean)
      .map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]),
  );
async function youngGenerationBytes(url: string): Promise<number> {
  const text = await fetch(`${url}/metrics`).then((r) => r.text());
  return Number(/^nodejs_heap_space_size_total_bytes\{space="new"\} (\d+)$/m.exec(text)?.[1]);
}

describe("serve's memory settings", () => {
  it("names what a process lacks, keeping what the user set", () => {
    expect(missingServeSettings({}, [])).toEqual({ env: SERVE_MALLOC_ENV, flags: SERVE_NODE_FLAGS });
    const mine = missingServeSettings(
      { MALLOC_MMAP_THRESHOLD_: "65536", NODE_OPTIONS: "--max-semi-space-size=64" },
      [],
    );
    expect(mine).toEqual({ env: { MALLOC_TRIM_THRESHOLD_: "131072" }, flags: [] });
    expect(missingServeSettings({ ...SERVE_MALLOC_ENV }, ["--max-semi-space-size=8"])).toEqual({
      env: {},
      flags: [],
    });
  });

  it("re-executes serve in place with them: same PID, the flags and environment, a 32 MiB young generation", async () => {
    const { pid, url } = await serve({});
    expect(argvOf(pid)).toContain("--max-semi-space-size=16");
    expect(envOf(pid)).toMatchObject(SERVE_MALLOC_ENV);
    expect(await youngGenerationBytes(url)).toBe(32 * 1024 * 1024);
  });

  it("keeps the user's own value, and ROLLGYM_RUNTIME=as-is changes nothing", async () => {
    const own = await serve({ MALLOC_MMAP_THRESHOLD_: "65536" });
    expect(envOf(own.pid)).toMatchObject({
      MALLOC_MMAP_THRESHOLD_: "65536",
      MALLOC_TRIM_THRESHOLD_: "131072",
    });
    const asIs = await serve({ ROLLGYM_RUNTIME: "as-is" });
    expect(argvOf(asIs.pid)).not.toContain("--max-semi-space-size=16");
    expect(envOf(asIs.pid).MALLOC_MMAP_THRESHOLD_).toBeUndefined();
  });
});
