// `rollgym envs play TAG --seed N` without --actions on a terminal: an interactive game, driven
// here through a pseudo-terminal (Python's pty module) as a person would play it.
import { spawn } from "node:child_process";
import { describe, expect, it } from "vitest";
import { expectUsageError, ROOT } from "../helpers/cli.ts";
import { runInProcess } from "./in-process.ts";

// Forks rollgym on a pty, sends keys once the screen shows what each step waits for, and
// prints {"status", "screen"} as JSON.
const DRIVER = String.raw`
import json, os, pty, select, sys, time
node, steps = sys.argv[1], json.loads(sys.argv[2])
pid, fd = pty.fork()
if pid == 0:
    os.execv(node, [node, "src/cli/main.ts", "envs", "play", "SimpleSokoban", "--seed", "10000"])
screen = b""
def read_until(text, timeout=20):
    global screen
    end = time.time() + timeout
    while time.time() < end:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                return False
            if not chunk:
                return False
            screen += chunk
            if text.encode() in screen.split(b"\x1b[2J")[-1]:
                return True
    return False
for wait_for, keys in steps:
    if not read_until(wait_for):
        print(json.dumps({"status": None, "screen": screen.decode("utf8", "replace"), "stuck": wait_for}))
        os.kill(pid, 9)
        sys.exit(0)
    os.write(fd, keys.encode())
read_until("\x00never", timeout=3)
_, status = os.waitpid(pid, 0)
print(json.dumps({"status": os.waitstatus_to_exitcode(status), "screen": screen.decode("utf8", "replace")}))
`;

function drive(
  steps: [string, string][],
): Promise<{ status: number | null; screen: string; stuck?: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn("python3", ["-c", DRIVER, process.execPath, JSON.stringify(steps)], { cwd: ROOT });
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    child.on("close", () => {
      try {
        resolve(JSON.parse(out));
      } catch {
        reject(new Error(`driver failed: ${err}${out}`));
      }
    });
  });
}

describe("envs play on a terminal", () => {
  it("plays SimpleSokoban seed 10000 with WASD and arrow keys, undo and reset, to the solution", async () => {
    const r = await drive([
      ["q quit", "a"], // Left
      ["Left: reward -0.1", "s"], // Down, a wall
      ["Down: reward -0.1 (no effect)", "u"], // undo it
      ["undone", "r"], // start over
      ["reset", "\u001b[D"], // Left arrow
      ["Left: reward -0.1", "w"], // Up
      ["Up: reward -0.1", "\u001b[A"], // Up arrow pushes the box home
      ["solved!", "q"],
    ]);
    expect(r.stuck, r.screen).toBeUndefined();
    expect(r.status).toBe(0);
    const last = r.screen.split("\u001b[2J").at(-1)!;
    expect(last).toContain("SimpleSokoban seed 10000: 3 actions of 10, reward 10.7");
    expect(last).toContain("#√####"); // the box on its target
    expect(r.screen).toContain("solved after 3 actions, reward 10.7");
  }, 60_000);

  it("without a terminal, --actions is required", async () => {
    expectUsageError(await runInProcess(["envs", "play", "SimpleSokoban", "--seed", "10000"]), [
      "--actions",
      "terminal",
    ]);
  });
});
