// A rollgym process that something else started on the user's behalf ends with it. `npx rollgym
// serve &` then `kill $!` signals npx: npm passes the SIGTERM to its `sh -c`, which dies without
// passing it on, and the node process below would keep its port forever. So a process started
// through npm (npm_lifecycle_event set), or by a parent that asks for it (ROLLGYM_EXIT_WITH_PARENT=1:
// bench's servers and engines, the example trainer's server), watches the processes that
// launched it and stops as on a SIGTERM once one has gone. Started any other way (a shell,
// nohup, systemd), a process outlives its parent as usual.
import { readFileSync } from "node:fs";
import { say } from "./io.ts";

/** Set to 1 in a child's environment: the child stops once this process has gone. */
const EXIT_WITH_PARENT = "ROLLGYM_EXIT_WITH_PARENT";

/** Whether this process ends with the processes that launched it. */
function tiedToParent(): boolean {
  return process.env.npm_lifecycle_event !== undefined || process.env[EXIT_WITH_PARENT] === "1";
}

/**
 * The processes that launched this one: the parent, and also the grandparent when the parent
 * is the `sh -c` npm runs scripts through (npm may die of a SIGTERM before passing it on, leaving
 * the shell alive). Read when this module loads, since they may die before the command is up.
 */
const LAUNCHERS = tiedToParent() ? launcherPids() : [process.ppid];

function launcherPids(): number[] {
  const launchers = [process.ppid];
  if (/^(sh|dash|bash)$/.test(procField(process.ppid, "comm") ?? "")) {
    const grandparent = Number(procField(process.ppid, "stat")?.split(") ")[1]?.split(" ")[1]);
    if (Number.isInteger(grandparent) && grandparent > 1) launchers.push(grandparent);
  }
  return launchers;
}

function stopAsOnSigterm(): void {
  say("the process that started rollgym exited: stopping as on SIGTERM");
  process.kill(process.pid, "SIGTERM");
}

/** What happens once a launcher has gone: by default, what a SIGTERM does to the command. */
let onGone = stopAsOnSigterm;

/** A command's own way to stop when its launcher has gone (serve's drain); null restores the default. */
export function whenParentGone(handler: (() => void) | null): void {
  onGone = handler ?? stopAsOnSigterm;
}

/** Watches the launchers (every half second) when this process is tied to them; see the top. */
export function tieToParent(): void {
  if (!tiedToParent()) return;
  const timer = setInterval(() => {
    // A parent that has gone leaves this process to another (init, a subreaper).
    if (process.ppid === LAUNCHERS[0] && LAUNCHERS.every(alive)) return;
    clearInterval(timer);
    // Our stdout and stderr may have gone with it.
    process.stdout.on("error", () => {});
    process.stderr.on("error", () => {});
    onGone();
  }, 500);
  timer.unref();
}

/** Running: a zombie (dead, not yet reaped by its own parent) has gone. */
function alive(pid: number): boolean {
  const stat = procField(pid, "stat");
  if (stat !== null) return stat.slice(stat.lastIndexOf(")") + 2)[0] !== "Z";
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code !== "ESRCH";
  }
}

/** A file of /proc/PID (Linux), trimmed; null where there is none. */
function procField(pid: number, name: "comm" | "stat"): string | null {
  try {
    return readFileSync(`/proc/${pid}/${name}`, "utf8").trim();
  } catch {
    return null;
  }
}
