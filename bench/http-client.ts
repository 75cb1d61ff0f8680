// Client CPU per chat request on three HTTP clients sending the same body to one mock engine
// (its own process), N requests in flight for S seconds each:
//   raw     a keep-alive socket per request in flight, prebuilt request bytes, the answer framed
//           by Content-Length and nothing more (the floor);
//   undici  one undici Client per request in flight (src/llm/http.ts before issue 32), body read
//           as text and parsed;
//   rollgym src/llm/http.ts requestJson (engine-socket.ts on node:net, the deadline sweep).
// Rounds alternate the clients so that a noisy machine weighs on all three alike.
//
//   node bench/http-client.ts [--in-flight 1024] [--seconds 5] [--rounds 3] [--clients raw,undici,rollgym]
import { spawn } from "node:child_process";
import { connect, type Socket } from "node:net";
import { Client } from "undici";
import { EngineConnections, JsonText, requestJson } from "../src/llm/http.ts";

function flag(name: string, fallback: number): number {
  const at = process.argv.indexOf(`--${name}`);
  if (at === -1) return fallback;
  const value = Number(process.argv[at + 1]);
  if (!Number.isInteger(value) || value < 1)
    throw new Error(`--${name}: a positive integer, not ${process.argv[at + 1]}`);
  return value;
}

const inFlight = flag("in-flight", 1024);
const seconds = flag("seconds", 5);
const rounds = flag("rounds", 3);
const clientsAt = process.argv.indexOf("--clients");
const clients = clientsAt === -1 ? ["raw", "undici", "rollgym"] : process.argv[clientsAt + 1].split(",");

const body = JSON.stringify({
  model: "mock/qwen-toy",
  messages: [
    { role: "system", content: "You are playing Sokoban. Answer with one move." },
    { role: "user", content: "#####\n#@$.#\n#####\nYour move?" },
  ],
  max_tokens: 16,
  temperature: 1,
});

/** Starts `rollgym mock-engine` on a free port; resolves with its origin and the process. */
async function startEngine(): Promise<{ origin: string; stop: () => void }> {
  const child = spawn(process.execPath, ["src/mock-engine/cli.ts", "--port", "0"], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  let out = "";
  for await (const data of child.stdout) {
    out += String(data);
    const match = /listening on (http:\/\/[\d.]+:\d+)/.exec(out);
    if (match) return { origin: match[1], stop: () => child.kill("SIGTERM") };
  }
  throw new Error(`the mock engine did not start: ${out}`);
}

/** A client under test: `start` keeps `inFlight` requests going until `stop`; `done` counts answers. */
interface Loop {
  name: string;
  done: number;
  running: boolean;
  run(): Promise<void>;
  close(): Promise<void>;
}

function rawLoop(origin: string): Loop {
  const url = new URL(origin);
  const request = Buffer.from(
    `POST /v1/chat/completions HTTP/1.1\r\nhost: ${url.host}\r\nconnection: keep-alive\r\n` +
      `content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
  let sockets: Socket[] = [];
  const loop: Loop = {
    name: "raw",
    done: 0,
    running: false,
    // Fresh connections each run: the engine closes those left idle between runs (its keep-alive
    // timeout), and this floor does not look for that.
    async run() {
      sockets = Array.from({ length: inFlight }, () =>
        connect({ host: url.hostname, port: Number(url.port), noDelay: true }),
      );
      await Promise.all(sockets.map((socket) => rawConnection(socket, request, loop)));
      for (const socket of sockets) socket.destroy();
    },
    async close() {
      for (const socket of sockets) socket.destroy();
    },
  };
  return loop;
}

/** Requests on one socket one after another, each answer framed by its Content-Length. */
function rawConnection(socket: Socket, request: Buffer, loop: Loop): Promise<void> {
  return new Promise((resolve, reject) => {
    let buffered: Buffer | null = null;
    const onData = (data: Buffer): void => {
      buffered = buffered === null ? data : Buffer.concat([buffered, data]);
      const headEnd = buffered.indexOf("\r\n\r\n");
      if (headEnd === -1) return;
      const at = buffered.indexOf("content-length: ");
      const length = Number(buffered.toString("latin1", at + 16, buffered.indexOf("\r\n", at)));
      if (buffered.length < headEnd + 4 + length) return;
      buffered = null;
      loop.done++;
      if (loop.running) socket.write(request);
      else {
        socket.off("data", onData);
        socket.off("error", reject);
        resolve();
      }
    };
    socket.on("data", onData);
    socket.on("error", reject);
    socket.write(request);
  });
}

function undiciLoop(origin: string): Loop {
  const clients = Array.from(
    { length: inFlight },
    () => new Client(origin, { pipelining: 1, headersTimeout: 0, bodyTimeout: 0 }),
  );
  const loop: Loop = {
    name: "undici",
    done: 0,
    running: false,
    async run() {
      await Promise.all(
        clients.map(async (client) => {
          while (loop.running) {
            const response = await client.request({
              path: "/v1/chat/completions",
              method: "POST",
              headers: { "content-type": "application/json" },
              body,
            });
            JSON.parse(await response.body.text());
            loop.done++;
          }
        }),
      );
    },
    async close() {
      await Promise.all(clients.map((client) => client.destroy()));
    },
  };
  return loop;
}

function rollgymLoop(origin: string): Loop {
  const connections = new EngineConnections();
  const url = `${origin}/v1/chat/completions`;
  const text = new JsonText(body);
  const options = { timeoutMs: 60_000, connections };
  const loop: Loop = {
    name: "rollgym",
    done: 0,
    running: false,
    async run() {
      await Promise.all(
        Array.from({ length: inFlight }, async () => {
          while (loop.running) {
            await requestJson("POST", url, text, options);
            loop.done++;
          }
        }),
      );
    },
    close: () => connections.close(),
  };
  return loop;
}

/** Runs `loop` for `ms` and returns client CPU µs per answer and answers per second. */
async function measure(loop: Loop, ms: number): Promise<{ cpuUs: number; perSecond: number }> {
  loop.done = 0;
  loop.running = true;
  const running = loop.run();
  // The first answers (connections opening) are not counted.
  await new Promise((resolve) => setTimeout(resolve, 500));
  const startDone = loop.done;
  const startCpu = process.cpuUsage();
  const started = performance.now();
  await new Promise((resolve) => setTimeout(resolve, ms));
  const cpu = process.cpuUsage(startCpu);
  const elapsed = performance.now() - started;
  const answers = loop.done - startDone;
  loop.running = false;
  await running;
  return { cpuUs: (cpu.user + cpu.system) / answers, perSecond: (answers / elapsed) * 1000 };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

async function main(): Promise<void> {
  const engine = await startEngine();
  const makers: Record<string, (origin: string) => Loop> = {
    raw: rawLoop,
    undici: undiciLoop,
    rollgym: rollgymLoop,
  };
  const loops = clients.map((name) => {
    const make = makers[name];
    if (make === undefined) throw new Error(`--clients: ${name} is not one of raw, undici, rollgym`);
    return make(engine.origin);
  });
  const results = new Map<string, { cpuUs: number[]; perSecond: number[] }>();
  console.log(
    `${inFlight} in flight, ${seconds} s per client per round, ${rounds} rounds, engine ${engine.origin}`,
  );
  try {
    for (let round = 0; round < rounds; round++) {
      // Alternate the order between rounds.
      const order = round % 2 === 0 ? loops : [...loops].reverse();
      for (const loop of order) {
        const { cpuUs, perSecond } = await measure(loop, seconds * 1000);
        const entry = results.get(loop.name) ?? { cpuUs: [], perSecond: [] };
        entry.cpuUs.push(cpuUs);
        entry.perSecond.push(perSecond);
        results.set(loop.name, entry);
        console.log(
          `round ${round + 1} ${loop.name.padEnd(8)} ${cpuUs.toFixed(1)} µs CPU/request, ${perSecond.toFixed(0)} requests/s`,
        );
      }
    }
  } finally {
    for (const loop of loops) await loop.close();
    engine.stop();
  }
  const cpu = (name: string): number => median(results.get(name)?.cpuUs ?? [Number.NaN]);
  console.log("\nclient   CPU µs/request (median; range)   requests/s (median)");
  for (const [name, { cpuUs, perSecond }] of results)
    console.log(
      `${name.padEnd(8)} ${median(cpuUs).toFixed(1).padStart(6)} (${Math.min(...cpuUs).toFixed(1)}–${Math.max(...cpuUs).toFixed(1)})` +
        `                 ${median(perSecond).toFixed(0)}`,
    );
  console.log(
    `\nrollgym ÷ raw ${(cpu("rollgym") / cpu("raw")).toFixed(2)}×, rollgym ÷ undici ${(cpu("rollgym") / cpu("undici")).toFixed(2)}×, ` +
      `undici ÷ raw ${(cpu("undici") / cpu("raw")).toFixed(2)}×`,
  );
}

await main();
