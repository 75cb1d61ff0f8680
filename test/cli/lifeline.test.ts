// Every process rollgym runs ends with what started it, whichever process is killed: `npx rollgym
// mock-engine &` then `kill $!` (the npx) used to leave the engine's node process on its port;
// the bench's engines and server end with the bench, also when it is SIGKILLed.
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import type { Readable } from "node:stream";
import { pathToFileURL } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { ROOT } from "../helpers/cli.ts";
import { descendants, gone, killLeftovers } from "../helpers/processes.ts";

const leftovers: number[] = [];
afterEach(() => killLeftovers(leftovers));

/** The first match of `pattern` in a line of `stream`; throws if the stream ends first. */
async function firstMatch(stream: Readable, pattern: RegExp): Promise<RegExpExecArray> {
  for await (const line of createInterface({ input: stream })) {
    const match = pattern.exec(line);
    if (match) return match;
  }
  throw new Error(`the output ended without a line matching ${pattern}`);
}

async function expectClosed(url: string): Promise<void> {
  await expect(fetch(url)).rejects.toThrow();
}

describe("child processes end with their parent", () => {
  for (const [name, args, listening] of [
    ["mock-engine", ["mock-engine", "--port", "0"], /mock engine listening on (\S+)/],
    // The tuned runtime re-executes in place (same pid): the new image watches the same launchers.
    ["serve --tuned-runtime", ["serve", "--port", "0", "--tuned-runtime"], /rollgym serving on (\S+)/],
  ] as const) {
    it(`\`npx rollgym ${name} &\` then \`kill $!\`: nothing of it keeps running, its port closes`, async () => {
      const npx = spawn("npx", ["rollgym", ...args], { cwd: ROOT, stdio: ["ignore", "pipe", "inherit"] });
      const [, url] = await firstMatch(npx.stdout, listening);
      const chain = descendants(npx.pid!);
      leftovers.push(...chain);
      // npx, its `sh -c` and the node process that listens.
      expect(chain.length).toBeGreaterThanOrEqual(2);
      npx.kill("SIGTERM");
      await gone(chain);
      await expectClosed(url);
    }, 60_000);
  }

  // A bench in a process of its own (src/bench/children.ts starts the engines and the server).
  const BENCH = `
    const children = await import(${JSON.stringify(pathToFileURL(`${ROOT}/src/bench/children.ts`).href)});
    const [engine] = await children.startMockEngines(1, "mock/m", []);
    const server = await children.startServe([engine.url], "mock/m", 1, []);
    console.log(JSON.stringify({ pids: [engine.pid, server.pid], urls: [engine.url, server.url] }));
    setInterval(() => {}, 1000);
  `;

  for (const signal of ["SIGKILL", "SIGTERM"] as const) {
    it(`a bench killed with ${signal} leaves neither its engine nor its server running`, async () => {
      const bench = spawn(process.execPath, ["--input-type=module", "-e", BENCH], {
        cwd: ROOT,
        stdio: ["ignore", "pipe", "inherit"],
      });
      const exited = new Promise<string | null>((resolve) =>
        bench.on("exit", (code, killedBy) => resolve(killedBy ?? `exit ${code}`)),
      );
      const [line] = await firstMatch(bench.stdout, /^\{.*\}$/);
      const { pids, urls } = JSON.parse(line) as { pids: number[]; urls: string[] };
      leftovers.push(...pids);
      bench.kill(signal);
      await gone(pids);
      for (const url of urls) await expectClosed(url);
      // A SIGTERM ends the bench with the shell's status for it, once it has stopped its children.
      expect(await exited).toBe(signal === "SIGKILL" ? "SIGKILL" : "exit 143");
    }, 60_000);
  }
});
