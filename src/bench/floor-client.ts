// The floor: what sending rollgym's chat requests costs a client that does nothing else. Run as
// a child process of the bench (src/bench/floor.ts), so process.cpuUsage() here is the client's
// CPU alone. Two clients, both keep-alive with one connection per request in flight:
//   raw:    a net.Socket per connection, each request's bytes built once up front, the answer
//           framed by Content-Length or chunked encoding and otherwise not looked at;
//   undici: an undici Client per connection, the body given as the same string rollgym sends,
//           the answer read as text.
// Neither parses the JSON: the floor is the transport alone.
import net from "node:net";
import { Client } from "undici";
import { round } from "./stats.ts";

export type FloorClient = "raw" | "undici";

export interface FloorJob {
  client: FloorClient;
  /** OpenAI base URLs (…/v1); connection i goes to engine i mod n. */
  urls: string[];
  /** Serialised chat request bodies, sent in turn. */
  bodies: string[];
  concurrency: number;
  windowS: number;
}

export interface FloorResult {
  client: FloorClient;
  requests: number;
  window_s: number;
  cpu_ms_per_request: number | null;
  cpu_cores: number;
  requests_per_s: number;
  failures: number;
  first_error: string | null;
}

interface Target {
  host: string;
  port: number;
  origin: string;
  path: string;
}

function targetOf(url: string): Target {
  const u = new URL(`${url.replace(/\/+$/, "")}/chat/completions`);
  if (u.protocol !== "http:") throw new Error(`floor: ${url} is not http (the floor speaks plain HTTP/1.1)`);
  return { host: u.hostname, port: Number(u.port || 80), origin: u.origin, path: u.pathname };
}

/** Sends one request and calls back with an error message, or null for a 200 answer read in full. */
type Send = (body: number, done: (error: string | null) => void) => void;

/** One raw keep-alive connection: writes prebuilt bytes, frames the answer, reconnects if closed. */
function rawConnection(target: Target, requests: readonly Buffer[]): { send: Send; close: () => void } {
  let socket: net.Socket | null = null;
  let received: Buffer[] = [];
  let receivedBytes = 0;
  let waiting: ((error: string | null) => void) | null = null;
  let closeAfter = false;

  const finish = (error: string | null) => {
    const callback = waiting;
    waiting = null;
    received = [];
    receivedBytes = 0;
    if (closeAfter || error !== null) {
      socket?.destroy();
      socket = null;
      closeAfter = false;
    }
    callback?.(error);
  };
  const onData = (chunk: Buffer) => {
    received.push(chunk);
    receivedBytes += chunk.length;
    const data = received.length === 1 ? received[0] : Buffer.concat(received, receivedBytes);
    received = [data];
    const headEnd = data.indexOf("\r\n\r\n");
    if (headEnd < 0) return;
    const head = data.toString("latin1", 0, headEnd);
    const status = Number(head.slice(9, 12));
    closeAfter = /\r\nconnection:\s*close/i.test(head);
    const length = /\r\ncontent-length:\s*(\d+)/i.exec(head);
    let complete: boolean;
    if (length) complete = data.length >= headEnd + 4 + Number(length[1]);
    else if (/\r\ntransfer-encoding:\s*chunked/i.test(head)) complete = chunkedEnd(data, headEnd + 4);
    else return finish(`HTTP ${status} without Content-Length or chunked encoding: ${head.slice(0, 200)}`);
    if (!complete) return;
    finish(status === 200 ? null : `HTTP ${status}: ${data.toString("utf8", headEnd + 4, headEnd + 204)}`);
  };
  const open = (): net.Socket => {
    const s = net.connect({ host: target.host, port: target.port, noDelay: true });
    s.on("data", onData);
    s.on("error", () => {});
    s.on("close", () => {
      if (socket === s) socket = null;
      if (waiting) finish("the engine closed the connection mid-answer");
    });
    return s;
  };
  return {
    send(body, done) {
      waiting = done;
      socket ??= open();
      socket.write(requests[body]);
    },
    close() {
      socket?.destroy();
      socket = null;
    },
  };
}

/** Whether the chunked body starting at `start` has reached its last (zero-length) chunk. */
function chunkedEnd(data: Buffer, start: number): boolean {
  let at = start;
  for (;;) {
    const lineEnd = data.indexOf("\r\n", at);
    if (lineEnd < 0) return false;
    const size = Number.parseInt(data.toString("latin1", at, lineEnd), 16);
    if (size === 0) return data.indexOf("\r\n", lineEnd + 2) >= 0;
    at = lineEnd + 2 + size + 2;
    if (at > data.length) return false;
  }
}

function undiciConnection(target: Target, bodies: readonly string[]): { send: Send; close: () => void } {
  const client = new Client(target.origin, { pipelining: 1 });
  const headers = { "content-type": "application/json" };
  return {
    send(body, done) {
      client.request({ path: target.path, method: "POST", headers, body: bodies[body] }).then(
        async (response) => {
          const text = await response.body.text();
          done(response.statusCode === 200 ? null : `HTTP ${response.statusCode}: ${text.slice(0, 200)}`);
        },
        (error: unknown) => done(error instanceof Error ? error.message : String(error)),
      );
    },
    close() {
      void client.destroy();
    },
  };
}

/** The request bytes of each body for `target`, as rollgym's client would frame them. */
function rawRequests(target: Target, bodies: readonly string[]): Buffer[] {
  return bodies.map((body) => {
    const bytes = Buffer.from(body, "utf8");
    const head =
      `POST ${target.path} HTTP/1.1\r\nhost: ${target.host}:${target.port}\r\n` +
      `content-type: application/json\r\ncontent-length: ${bytes.length}\r\n\r\n`;
    return Buffer.concat([Buffer.from(head, "latin1"), bytes]);
  });
}

/**
 * Warms up until every connection has had an answer, then counts the answers and this
 * process's CPU over `windowS` seconds, then lets the requests in flight finish.
 */
export async function runFloor(job: FloorJob): Promise<FloorResult> {
  const targets = job.urls.map(targetOf);
  const perTarget = targets.map((t) => (job.client === "raw" ? rawRequests(t, job.bodies) : job.bodies));
  const connections = Array.from({ length: job.concurrency }, (_, i) => {
    const t = i % targets.length;
    return job.client === "raw"
      ? rawConnection(targets[t], perTarget[t] as Buffer[])
      : undiciConnection(targets[t], perTarget[t] as string[]);
  });
  let answered = 0;
  let failures = 0;
  let firstError: string | null = null;
  let next = 0;
  let start: { at: number; cpu: NodeJS.CpuUsage; answered: number } | null = null;
  let end: { at: number; cpu: NodeJS.CpuUsage; answered: number } | null = null;
  const mark = () => ({ at: performance.now(), cpu: process.cpuUsage(), answered });
  // A warm-up that never completes (an engine failing) still gets a window after a while.
  const warmLimit = setTimeout(
    () => {
      start ??= mark();
    },
    Math.max(60, 10 * job.windowS) * 1000,
  );
  const stopped = new Promise<void>((resolve) => {
    let open = connections.length;
    const loop = (c: (typeof connections)[number]) => {
      if (end) {
        c.close();
        if (--open === 0) resolve();
        return;
      }
      c.send(next++ % job.bodies.length, (error) => {
        if (error === null) answered++;
        else {
          failures++;
          firstError ??= error;
        }
        if (!start && answered >= job.concurrency) start = mark();
        if (start && !end && performance.now() - start.at >= job.windowS * 1000) end = mark();
        // A failing engine must not turn the loops into a busy spin.
        if (error === null) loop(c);
        else setTimeout(() => loop(c), 100);
      });
    };
    for (const c of connections) loop(c);
  });
  await stopped;
  clearTimeout(warmLimit);
  const a = start ?? mark();
  const b = end ?? mark();
  const seconds = (b.at - a.at) / 1000;
  const cpuS = (b.cpu.user - a.cpu.user + b.cpu.system - a.cpu.system) / 1e6;
  const requests = b.answered - a.answered;
  return {
    client: job.client,
    requests,
    window_s: round(seconds, 2),
    cpu_ms_per_request: requests === 0 ? null : round((cpuS / requests) * 1000, 4),
    cpu_cores: round(cpuS / seconds, 3),
    requests_per_s: round(requests / seconds, 1),
    failures,
    first_error: firstError,
  };
}

// As a child process (forked by src/bench/floor.ts): one job in over IPC, its result out.
if (process.send && process.argv[2] === "--floor-child") {
  process.once("message", (job: FloorJob) => {
    runFloor(job).then(
      (result) => process.send?.({ result }, () => process.exit(0)),
      (error: unknown) =>
        process.send?.({ error: error instanceof Error ? error.message : String(error) }, () =>
          process.exit(1),
        ),
    );
  });
  // The bench went away: so does its floor client.
  process.once("disconnect", () => process.exit(1));
}
