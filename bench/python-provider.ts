// Per-step overhead of the Python environment provider (python/rollgym_envs): an env that does
// nothing (bench/provider_null_env.py) served by the provider, played by N sessions at once, each
// a closed loop of OpenEnv step frames over its own socket, the way rollgym's remote tags step
// (one frame per step, each answered before the session's next). Prints, per row: steps/s, the
// mean round trip, and the CPU per step of the provider's own process (WebSocket, JSON, routing,
// the pipe to a worker), of its workers (the pipe and the call) and of this client.
// Usage: node bench/python-provider.ts [--sessions 1,64] [--steps 300] [--workers 2] [--rounds 3] [--json FILE]
import { type ChildProcess, spawn } from "node:child_process";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { WebSocket } from "ws";

const ROOT = join(import.meta.dirname, "..");
const { values } = parseArgs({
  options: {
    sessions: { type: "string", default: "1,64" },
    steps: { type: "string", default: "300" },
    workers: { type: "string", default: "2" },
    rounds: { type: "string", default: "3" },
    json: { type: "string" },
  },
});
const positive = (flag: string, text: string | undefined): number => {
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${flag}: ${text} is not a positive integer`);
  return n;
};
const sessionCounts = values.sessions!.split(",").map((s) => positive("sessions", s));
const steps = positive("steps", values.steps);
const workers = positive("workers", values.workers);
const rounds = positive("rounds", values.rounds);

/** CPU seconds (user + system) of process `pid` so far. */
function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in clock ticks
}

function childrenOf(pid: number): number[] {
  const found: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const fields = readFileSync(`/proc/${entry}/stat`, "utf8").split(") ")[1]!.split(" ");
      if (Number(fields[1]) === pid) found.push(Number(entry));
    } catch {
      // ended meanwhile
    }
  }
  return found;
}

async function startProvider(): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(
    "/usr/bin/python3",
    [
      "-m",
      "rollgym_envs",
      "Null=provider_null_env:Null",
      "--port",
      "0",
      "--workers",
      String(workers),
      "--max-sessions",
      "1024",
    ],
    {
      cwd: ROOT,
      env: { ...process.env, PYTHONPATH: `${ROOT}/python:${ROOT}/bench`, PYTHONDONTWRITEBYTECODE: "1" },
      stdio: ["ignore", "pipe", "inherit"],
    },
  );
  const lines = createInterface({ input: child.stdout! });
  const url = await new Promise<string>((resolve, reject) => {
    lines.on("line", (line) => {
      const found = /at http:\/\/(\S+)/.exec(line)?.[1];
      if (found) resolve(`ws://${found}/ws`);
    });
    child.once("exit", (code) => reject(new Error(`the provider exited (${code})`)));
  });
  return { child, url };
}

interface Session {
  send: (frame: string) => Promise<string>;
  close: () => void;
}

/** One session: a socket that answers one frame at a time. */
async function openSession(url: string): Promise<Session> {
  const ws = new WebSocket(url);
  await new Promise((resolve, reject) => {
    ws.once("open", resolve);
    ws.once("error", reject);
  });
  let waiting: ((text: string) => void) | null = null;
  ws.on("message", (data) => {
    const done = waiting;
    if (!done) throw new Error(`an answer nothing asked for: ${String(data).slice(0, 300)}`);
    waiting = null;
    done(String(data));
  });
  const send = (frame: string) =>
    new Promise<string>((resolve) => {
      waiting = resolve;
      ws.send(frame);
    });
  return { send, close: () => ws.close() };
}

interface Row {
  sessions: number;
  steps: number;
  steps_per_s: number;
  mean_round_trip_ms: number;
  provider_cpu_us_per_step: number;
  workers_cpu_us_per_step: number;
  client_cpu_us_per_step: number;
  load1: number;
}

async function measure(url: string, provider: number, sessions: number): Promise<Row> {
  const sockets = await Promise.all(Array.from({ length: sessions }, () => openSession(url)));
  await Promise.all(sockets.map((s, i) => s.send(JSON.stringify({ type: "reset", data: { seed: i } }))));
  const step = JSON.stringify({ type: "step", data: { action: "go" } });
  const workerPids = childrenOf(provider);
  const cpuBefore = [cpuSeconds(provider), workerPids.reduce((sum, pid) => sum + cpuSeconds(pid), 0)];
  const clientBefore = process.cpuUsage();
  const started = performance.now();
  let roundTrips = 0;
  await Promise.all(
    sockets.map(async ({ send }) => {
      for (let i = 0; i < steps; i++) {
        const sent = performance.now();
        const answer = await send(step);
        roundTrips += performance.now() - sent;
        if (!answer.startsWith('{"type": "observation"')) throw new Error(`not an observation: ${answer}`);
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  const total = sessions * steps;
  const client = process.cpuUsage(clientBefore);
  const providerCpu = cpuSeconds(provider) - cpuBefore[0]!;
  const workersCpu = workerPids.reduce((sum, pid) => sum + cpuSeconds(pid), 0) - cpuBefore[1]!;
  for (const session of sockets) session.close();
  return {
    sessions,
    steps: total,
    steps_per_s: Math.round(total / seconds),
    mean_round_trip_ms: Number((roundTrips / total).toFixed(3)),
    provider_cpu_us_per_step: Math.round((providerCpu * 1e6) / total),
    workers_cpu_us_per_step: Math.round((workersCpu * 1e6) / total),
    client_cpu_us_per_step: Math.round((client.user + client.system) / total),
    load1: Number(loadavg()[0]!.toFixed(2)),
  };
}

const { child, url } = await startProvider();
const rows: Row[] = [];
try {
  await measure(url, child.pid!, 8); // warm-up: imports, first forks' page faults
  for (let round = 0; round < rounds; round++) {
    for (const sessions of sessionCounts) {
      const row = await measure(url, child.pid!, sessions);
      rows.push(row);
      console.log(JSON.stringify(row));
    }
  }
} finally {
  child.kill("SIGTERM");
}
console.log(
  "\n| sessions | steps/s | mean round trip | provider CPU/step | workers CPU/step | client CPU/step |",
);
console.log("|---|---|---|---|---|---|");
for (const sessions of sessionCounts) {
  const mine = rows.filter((r) => r.sessions === sessions);
  const median = (key: keyof Row) => mine.map((r) => r[key]).sort((a, b) => a - b)[mine.length >> 1]!;
  console.log(
    `| ${sessions} | ${median("steps_per_s")} | ${median("mean_round_trip_ms")} ms | ${median("provider_cpu_us_per_step")} µs | ${median("workers_cpu_us_per_step")} µs | ${median("client_cpu_us_per_step")} µs |`,
  );
}
if (values.json) writeFileSync(values.json, JSON.stringify(rows, null, 2));
