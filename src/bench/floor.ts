// Runs the floor clients (src/bench/floor-client.ts) each in a child process of its own, one after
// the other, against the engines the rollgym window used: their CPU per request is the cost of
// the requests alone, what rollgym's server CPU per request is divided by.
import { fork } from "node:child_process";
import { fileURLToPath } from "node:url";
import type { FloorClient, FloorJob, FloorResult } from "./floor-client.ts";

export type { FloorClient, FloorResult } from "./floor-client.ts";
export const FLOOR_CLIENTS: readonly FloorClient[] = ["raw", "undici"];

// From a checkout the sources run as TypeScript; the published package runs them compiled.
const FLOOR_CHILD = fileURLToPath(
  new URL(import.meta.url.endsWith(".ts") ? "./floor-client.ts" : "./floor-client.js", import.meta.url),
);

/** One floor client's run in a forked child; rejects with the child's error or exit. */
export function runFloorChild(job: FloorJob): Promise<FloorResult> {
  const child = fork(FLOOR_CHILD, ["--floor-child"], {
    // A client on Node's defaults: no inspector, profiler or heap flags of the bench's own.
    execArgv: [],
    env: { ...process.env, NODE_OPTIONS: "" },
    stdio: ["ignore", "ignore", "pipe", "ipc"],
  });
  let stderr = "";
  child.stderr?.setEncoding("utf8");
  child.stderr?.on("data", (text: string) => {
    stderr = (stderr + text).slice(-2000);
  });
  const killOnExit = () => child.kill("SIGKILL");
  process.once("exit", killOnExit);
  return new Promise<FloorResult>((resolve, reject) => {
    let answer: { result?: FloorResult; error?: string } | null = null;
    child.once("message", (message: { result?: FloorResult; error?: string }) => {
      answer = message;
    });
    child.once("error", reject);
    child.once("exit", (code, signal) => {
      process.off("exit", killOnExit);
      if (answer?.result) resolve(answer.result);
      else
        reject(
          new Error(
            `floor client ${job.client}: ${answer?.error ?? `exited (${signal ?? `status ${code}`}) without a result`}${stderr.trim() ? `: ${stderr.trim()}` : ""}`,
          ),
        );
    });
    child.send(job);
  });
}
