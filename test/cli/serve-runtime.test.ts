// `rollgym serve` runs as started, like any Node server: under child_process.fork (readiness
// through process.send, the IPC channel open), under cluster (the primary sees the worker
// listen) and under --inspect (the user's inspector stays). Its measured memory settings
// (src/cli/runtime.ts) are an opt-in, `--tuned-runtime` or ROLLGYM_RUNTIME=tuned, applied by
// re-executing in place (same PID) unless one of those holds the process; `--print-runtime`
// prints them as lines for a Dockerfile, a systemd unit or a shell.

import { type ChildProcess, fork, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { servingUrl } from "../../src/bench/children.ts";
import {
  findJemalloc,
  JEMALLOC_PATHS,
  missingServeSettings,
  type ProcessSituation,
  runtimeLines,
  SERVE_MALLOC_ENV,
  SERVE_NODE_FLAGS,
  tunedRuntimeAsked,
  whyNotReexecute,
} from "../../src/cli/runtime.ts";
import { ROOT, rollgym } from "../helpers/cli.ts";
import { runInProcess } from "./in-process.ts";

const children: ChildProcess[] = [];
const pids: number[] = [];
afterEach(() => {
  for (const child of children.splice(0)) child.kill("SIGKILL");
  for (const pid of pids.splice(0)) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {}
  }
});

/** This environment without any serve setting of its own, plus `env`. */
function cleanEnv(env: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const clean = { ...process.env };
  for (const name of [...Object.keys(SERVE_MALLOC_ENV), "LD_PRELOAD", "NODE_OPTIONS", "ROLLGYM_RUNTIME"])
    delete clean[name];
  return { ...clean, ...env };
}

interface Started {
  child: ChildProcess;
  pid: number;
  /** Everything on stderr so far. */
  stderr: () => string;
}

/** `node NODE_ARGS src/cli/main.ts serve --port 0 ARGS` with stdout and stderr piped. */
function startNode(nodeArgs: readonly string[], args: readonly string[], env: NodeJS.ProcessEnv): Started {
  const child = spawn(process.execPath, [...nodeArgs, "src/cli/main.ts", "serve", "--port", "0", ...args], {
    cwd: ROOT,
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  return watched(child);
}

function watched(child: ChildProcess): Started {
  children.push(child);
  let stderr = "";
  child.stderr!.setEncoding("utf8").on("data", (d: string) => (stderr += d));
  return { child, pid: child.pid!, stderr: () => stderr };
}

async function listening(started: Started): Promise<string> {
  const url = await servingUrl(started.child.stdout!);
  if (!url) throw new Error(`rollgym serve exited before listening: ${started.stderr()}`);
  started.child.stdout!.resume();
  return url;
}

const argvOf = (pid: number) => readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").slice(0, -1);
const mapsOf = (pid: number) => readFileSync(`/proc/${pid}/maps`, "utf8");
const envOf = (pid: number) =>
  Object.fromEntries(
    readFileSync(`/proc/${pid}/environ`, "utf8")
      .split("\0")
      .filter(Boolean)
      .map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]),
  );

/** The process runs without any of the tuned settings (it was not re-executed with them). */
function expectAsStarted(pid: number): void {
  for (const flag of SERVE_NODE_FLAGS) expect(argvOf(pid)).not.toContain(flag);
  expect(envOf(pid).LD_PRELOAD).toBeUndefined();
  expect(envOf(pid).MALLOC_MMAP_THRESHOLD_).toBeUndefined();
  expect(mapsOf(pid)).not.toContain("libjemalloc");
}

const REFUSED = "tuned runtime not applied";

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

  it("are applied only when asked for: --tuned-runtime or ROLLGYM_RUNTIME=tuned", () => {
    expect(tunedRuntimeAsked(false, {})).toBe(false);
    expect(tunedRuntimeAsked(false, { ROLLGYM_RUNTIME: "as-is" })).toBe(false);
    expect(tunedRuntimeAsked(true, {})).toBe(true);
    expect(tunedRuntimeAsked(false, { ROLLGYM_RUNTIME: "tuned" })).toBe(true);
    expect(() => tunedRuntimeAsked(false, { ROLLGYM_RUNTIME: "fast" })).toThrow(
      /ROLLGYM_RUNTIME: "fast" is not a runtime; allowed: tuned .*as-is/,
    );
  });

  it("are never applied under IPC, cluster or an inspector, and say why", () => {
    const free: ProcessSituation = {
      platform: "linux",
      canExecve: true,
      ipc: false,
      clusterWorker: false,
      inspectorUrl: undefined,
      execArgv: [],
      env: {},
    };
    expect(whyNotReexecute(free)).toBeNull();
    expect(whyNotReexecute({ ...free, ipc: true })).toMatch(/IPC channel .* would close it/);
    expect(whyNotReexecute({ ...free, ipc: true, clusterWorker: true })).toMatch(/cluster worker/);
    const url = "ws://127.0.0.1:9229/x";
    expect(whyNotReexecute({ ...free, inspectorUrl: url })).toContain(`inspector is active (${url})`);
    // A flag asks for an inspector even before it is up (--inspect-brk, --inspect-wait).
    expect(whyNotReexecute({ ...free, execArgv: ["--inspect-wait=0"] })).toContain("--inspect-wait=0");
    expect(whyNotReexecute({ ...free, env: { NODE_OPTIONS: "--inspect" } })).toContain("inspector");
    expect(whyNotReexecute({ ...free, execArgv: ["--inspect-port=9230"] })).toBeNull();
    expect(whyNotReexecute({ ...free, platform: "darwin" })).toMatch(/needs Linux \(this is darwin\)/);
    expect(whyNotReexecute({ ...free, canExecve: false })).toMatch(/no process.execve/);
  });

  it("--print-runtime gives them as Dockerfile, systemd and shell lines", async () => {
    const lines = runtimeLines(
      ["--port", "9000", "--token", "a b$%'"],
      null,
      "/usr/bin/node",
      "/app/bin/rollgym.js",
    );
    const flags = SERVE_NODE_FLAGS.join(" ");
    expect(lines).toContain("ENV MALLOC_MMAP_THRESHOLD_=131072 MALLOC_TRIM_THRESHOLD_=131072\n");
    expect(lines).toContain(
      `CMD ["/usr/bin/node", ${SERVE_NODE_FLAGS.map((f) => `"${f}"`).join(", ")}, "/app/bin/rollgym.js", "serve", "--port", "9000", "--token", "a b$%'"]\n`,
    );
    expect(lines).toContain(
      "Environment=MALLOC_MMAP_THRESHOLD_=131072 MALLOC_TRIM_THRESHOLD_=131072\n" +
        `ExecStart=/usr/bin/node ${flags} /app/bin/rollgym.js serve --port 9000 --token "a b$$%%'"\n`,
    );
    expect(lines).toContain(
      `MALLOC_MMAP_THRESHOLD_=131072 MALLOC_TRIM_THRESHOLD_=131072 /usr/bin/node ${flags} /app/bin/rollgym.js serve --port 9000 --token 'a b$%'\\'''\n`,
    );
    const jemalloc = "/usr/lib64/libjemalloc.so.2";
    expect(runtimeLines([], jemalloc, "node", "rollgym.js")).toContain(`ENV LD_PRELOAD=${jemalloc}\n`);
    // The command prints them for this machine and exits without serving.
    const printed = await runInProcess(["serve", "--print-runtime", "--port", "9000"]);
    expect(printed.code).toBe(0);
    expect(printed.stdout).toMatch(/^CMD \[.*"serve", "--port", "9000"\]$/m);
  });

  it("the printed lines start a server with the settings, which then needs no re-execution", async () => {
    // Printed by `npx rollgym`, so they name this node and the package's bin/rollgym.js.
    const printed = await rollgym(["serve", "--print-runtime", "--port", "0", "--tuned-runtime"]);
    expect(printed.stdout).toContain("/bin/rollgym.js");
    const cmd = JSON.parse(/^CMD (.*)$/m.exec(printed.stdout)![1]) as string[];
    const env = Object.fromEntries(
      /^ENV (.*)$/m
        .exec(printed.stdout)![1]
        .split(" ")
        .map((kv) => kv.split("=") as [string, string]),
    );
    // Node refuses two of the flags in NODE_OPTIONS; on its command line it must take them all.
    const started = watched(
      spawn(cmd[0], cmd.slice(1), { cwd: ROOT, env: cleanEnv(env), stdio: ["ignore", "pipe", "pipe"] }),
    );
    const url = await listening(started);
    expect((await fetch(`${url}/healthz`)).ok).toBe(true);
    expect(argvOf(started.pid)).toEqual(cmd);
    if (findJemalloc()) expect(mapsOf(started.pid)).toContain("libjemalloc.so.2");
    else expect(envOf(started.pid)).toMatchObject(SERVE_MALLOC_ENV);
    expect(started.stderr()).not.toContain(REFUSED);
  });

  it("serve runs as started by default", async () => {
    const started = startNode([], [], cleanEnv());
    await listening(started);
    expectAsStarted(started.pid);
  });

  it("--tuned-runtime re-executes in place: same PID, the flags, the allocator, the user's own values kept", async () => {
    const started = startNode([], ["--tuned-runtime"], cleanEnv({ MALLOC_TRIM_THRESHOLD_: "65536" }));
    const url = await listening(started);
    expect(argvOf(started.pid)).toEqual(expect.arrayContaining([...SERVE_NODE_FLAGS]));
    const jemalloc = findJemalloc();
    if (jemalloc) {
      // .ci/run installs Debian's libjemalloc2, so CI takes this branch.
      expect(envOf(started.pid).LD_PRELOAD).toBe(jemalloc);
      expect(mapsOf(started.pid)).toContain("libjemalloc.so.2");
    } else expect(envOf(started.pid)).toMatchObject({ ...SERVE_MALLOC_ENV, MALLOC_TRIM_THRESHOLD_: "65536" });
    expect(envOf(started.pid).MALLOC_TRIM_THRESHOLD_).toBe("65536");
    // V8 took the flags (an unknown one would have stopped node before it listened).
    expect((await fetch(`${url}/healthz`)).ok).toBe(true);
  });

  it("a bad ROLLGYM_RUNTIME is a usage error", async () => {
    const started = startNode([], [], cleanEnv({ ROLLGYM_RUNTIME: "fast" }));
    const code = await new Promise((resolve) => started.child.once("exit", resolve));
    expect(code).toBe(2);
    expect(started.stderr()).toMatch(/^rollgym: ROLLGYM_RUNTIME: "fast" is not a runtime; allowed: tuned/);
  });
});

// Each with the tuned runtime asked for through the environment (set once for a whole fleet,
// say): refused with a note, and the server behaves as started.
describe("serve under what holds a Node process", () => {
  it("child_process.fork: readiness through process.send, and the IPC channel stays open", async () => {
    const child = fork("src/cli/main.ts", ["serve", "--port", "0"], {
      cwd: ROOT,
      env: cleanEnv({ ROLLGYM_RUNTIME: "tuned" }),
      execArgv: [],
      silent: true,
    });
    const started = watched(child);
    let disconnected = false;
    child.once("disconnect", () => {
      disconnected = true;
    });
    const ready = new Promise((resolve) => child.once("message", resolve));
    const url = await listening(started);
    expect(await ready).toBe("ready");
    expect((await fetch(`${url}/healthz`)).ok).toBe(true);
    expect(child.connected).toBe(true);
    expect(disconnected).toBe(false);
    expect(started.stderr()).toMatch(new RegExp(`${REFUSED}: this process has an IPC channel`));
    expectAsStarted(started.pid);
    // And it stops on SIGTERM like any server: the open channel does not keep it alive.
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
  });

  it("cluster: the primary sees its worker listen and serve", async () => {
    // A primary of its own (cluster's settings are process-wide), printing what it sees as JSON.
    const primary = `
      import cluster from "node:cluster";
      cluster.setupPrimary({ exec: "src/cli/main.ts", args: ["serve", "--port", "0"], execArgv: [] });
      const worker = cluster.fork();
      const say = (event) => process.stdout.write(JSON.stringify(event) + "\\n");
      say({ worker: worker.process.pid });
      worker.on("message", (message) => say({ message }));
      cluster.on("listening", (_, address) => say({ listening: address }));
      cluster.on("exit", (_, code) => say({ exit: code }));`;
    const started = watched(
      spawn(process.execPath, ["--input-type=module", "-e", primary], {
        cwd: ROOT,
        env: cleanEnv({ ROLLGYM_RUNTIME: "tuned" }),
        stdio: ["ignore", "pipe", "pipe"],
      }),
    );
    const events: Record<string, unknown>[] = [];
    let buffered = "";
    const seen = new Promise<void>((resolve) =>
      started.child.stdout!.setEncoding("utf8").on("data", (text: string) => {
        const lines = (buffered + text).split("\n");
        buffered = lines.pop()!;
        for (const line of lines) if (line.startsWith("{")) events.push(JSON.parse(line));
        if (events.some((e) => "listening" in e) && events.some((e) => "message" in e)) resolve();
        if (events.some((e) => "exit" in e)) resolve();
      }),
    );
    const worker = () => events.find((e) => "worker" in e)?.worker as number | undefined;
    try {
      await seen;
      expect(
        events.find((e) => "exit" in e),
        started.stderr(),
      ).toBeUndefined();
      const { port } = events.find((e) => "listening" in e)!.listening as { port: number };
      expect(events.find((e) => "message" in e)!.message).toBe("ready");
      expect((await fetch(`http://127.0.0.1:${port}/healthz`)).ok).toBe(true);
      expect(started.stderr()).toMatch(new RegExp(`${REFUSED}: this is a cluster worker`));
      expectAsStarted(worker()!);
    } finally {
      if (worker()) pids.push(worker()!);
    }
  });

  it("--inspect: the inspector the user started stays the process's, with the same session", async () => {
    const started = startNode(["--inspect=127.0.0.1:0"], ["--tuned-runtime"], cleanEnv());
    const url = await listening(started);
    const inspector = /Debugger listening on ws:\/\/(127\.0\.0\.1:\d+)\/([\w-]+)/.exec(started.stderr());
    expect(inspector, started.stderr()).not.toBeNull();
    const [, address, id] = inspector!;
    // The one the process printed at start is still listening, with the same session id.
    const targets = (await (await fetch(`http://${address}/json/list`)).json()) as { id: string }[];
    expect(targets.map((t) => t.id)).toEqual([id]);
    expect(started.stderr().match(/Debugger listening/g)).toHaveLength(1);
    expect(started.stderr()).toMatch(
      new RegExp(`${REFUSED}: an inspector is active \\(ws://${address}/${id}\\)`),
    );
    expect((await fetch(`${url}/healthz`)).ok).toBe(true);
    expectAsStarted(started.pid);
  });
});
