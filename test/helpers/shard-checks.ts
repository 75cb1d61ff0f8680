// The sharded client's checks without Ray (test/python/*_check.py): each starts plain
// `rollgym serve` processes from this checkout, plays, and prints a JSON summary as its last line.
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { expect } from "vitest";
import { ROOT } from "./cli.ts";

const PYTHON = "/usr/bin/python3";

/** Runs test/python/`script` under Debian's Python (the client needs only websockets and msgpack); its summary, once it exited 0. */
export function shardCheck(
  script: string,
  timeoutMs: number,
  env: Record<string, string> = {},
): Record<string, any> {
  const result = spawnSync(PYTHON, ["-W", "ignore", join("test", "python", script)], {
    cwd: ROOT,
    encoding: "utf8",
    timeout: timeoutMs,
    env: {
      ...process.env,
      PYTHONPATH: "python",
      PYTHONDONTWRITEBYTECODE: "1",
      ROLLGYM_COMMAND: JSON.stringify([process.execPath, join(ROOT, "bin", "rollgym.js")]),
      ...env,
    },
  });
  expect(result.status, `${result.stdout}\n${result.stderr}`).toBe(0);
  return JSON.parse(result.stdout.trim().split("\n").at(-1) ?? "{}");
}
