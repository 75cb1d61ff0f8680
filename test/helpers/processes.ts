// The processes a command leaves running, read from Linux's /proc: what the tests of wrappers
// (npm start, npx) and of killed parents look for.
import { readdirSync, readFileSync } from "node:fs";
import { expect } from "vitest";

/** A process's state letter (R, S, Z, …), or null once it has gone. */
function stateOf(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // pid (comm) state ppid …; comm may hold spaces and parentheses.
    return stat.slice(stat.lastIndexOf(")") + 2)[0];
  } catch {
    return null;
  }
}

/** Every process below `pid` now. */
export function descendants(pid: number): number[] {
  const parentOf = new Map<number, number>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      parentOf.set(Number(entry), ppid);
    } catch {
      // it exited meanwhile
    }
  }
  const found: number[] = [];
  let frontier = [pid];
  while (frontier.length > 0) {
    const children = [...parentOf].filter(([, ppid]) => frontier.includes(ppid)).map(([child]) => child);
    found.push(...children);
    frontier = children;
  }
  return found;
}

/** Whether `pid` is running (a zombie counts as gone). */
export function running(pid: number): boolean {
  const state = stateOf(pid);
  return state !== null && state !== "Z";
}

/** Waits (at most `timeoutMs`) until none of `pids` runs; fails naming those left if some still do. */
export async function gone(pids: readonly number[], timeoutMs = 20_000): Promise<void> {
  await expect
    .poll(() => pids.filter(running).map((pid) => `${pid}`), { timeout: timeoutMs, interval: 100 })
    .toEqual([]);
}

/** SIGKILLs those of `pids` still running rollgym (a pid can be reused once its process has gone). */
export function killLeftovers(pids: number[]): void {
  for (const pid of pids.splice(0)) {
    try {
      if (readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("rollgym")) process.kill(pid, "SIGKILL");
    } catch {
      // already gone
    }
  }
}
