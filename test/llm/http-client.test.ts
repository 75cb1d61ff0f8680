// The engine HTTP client against a raw socket server that answers exactly the bytes each case
// needs: chunked streams cut mid-character, Connection: close, keep-alive connections the server
// drops while idle or as a request arrives, malformed answers, https, and deadlines on the sweep.
import { execFileSync } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer as createHttpsServer } from "node:https";
import { type AddressInfo, createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { deadline, type PauseClock } from "../../src/llm/deadline.ts";
import { EngineConnections, EngineError, requestEvents, requestJson } from "../../src/llm/http.ts";
import { failure } from "../helpers/failure.ts";

/** What the server does with one request on a connection (its index counts from 0). */
type Answer = (socket: Socket, index: number) => void | Promise<void>;

let server: Server;
let base: string;
const routes = new Map<string, Answer>();
/** Requests read, by path. */
const seen = new Map<string, number>();
/** Connections accepted so far. */
let accepted = 0;

function json(status: number, body: unknown, extra = ""): string {
  const text = JSON.stringify(body);
  return `HTTP/1.1 ${status} X\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\n${extra}\r\n${text}`;
}

/** Reads requests off one connection (head, then Content-Length bytes of body) and routes them. */
function serve(socket: Socket): void {
  accepted++;
  let buffered = Buffer.alloc(0);
  let index = 0;
  socket.on("error", () => {});
  socket.on("data", (data: Buffer) => {
    buffered = Buffer.concat([buffered, data]);
    for (;;) {
      const end = buffered.indexOf("\r\n\r\n");
      if (end === -1) return;
      const head = buffered.subarray(0, end).toString("latin1");
      const length = Number(/content-length: (\d+)/i.exec(head)?.[1] ?? 0);
      if (buffered.length < end + 4 + length) return;
      buffered = buffered.subarray(end + 4 + length);
      const path = head.split(" ")[1];
      seen.set(path, (seen.get(path) ?? 0) + 1);
      const answer = routes.get(path) ?? ((s: Socket) => void s.write(json(200, { ok: true })));
      void answer(socket, index++);
    }
  });
}

beforeAll(async () => {
  server = createServer(serve);
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => {
  server.close();
});

const options = { timeoutMs: 5_000 };

describe("the engine HTTP client", () => {
  it("reads a chunked answer written a few bytes at a time, and streams events across a split character", async () => {
    const body = JSON.stringify({ text: "grüße 🚀" });
    const bytes = Buffer.from(
      `HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n${Buffer.byteLength(body).toString(16)};ext=1\r\n${body}\r\n0\r\nX-T: 1\r\n\r\n`,
    );
    routes.set("/chunked", async (socket) => {
      for (let at = 0; at < bytes.length; at += 7) {
        socket.write(bytes.subarray(at, at + 7));
        await sleep(1);
      }
    });
    const connections = new EngineConnections();
    expect(await requestJson("GET", `${base}/chunked`, undefined, { ...options, connections })).toEqual({
      text: "grüße 🚀",
    });
    // The rocket's four bytes arrive in two writes: the event still decodes whole.
    const events = Buffer.from('data: {"t":"🚀"}\n\ndata: {"t":"é"}\n\ndata: [DONE]\n\n');
    const cut = events.indexOf(Buffer.from("🚀")) + 2;
    routes.set("/stream", async (socket) => {
      socket.write(
        `HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n`,
      );
      for (const part of [events.subarray(0, cut), events.subarray(cut)]) {
        socket.write(`${part.length.toString(16)}\r\n`);
        socket.write(Buffer.concat([part, Buffer.from("\r\n")]));
        await sleep(20);
      }
      socket.write("0\r\n\r\n");
    });
    const got: unknown[] = [];
    await requestEvents(`${base}/stream`, {}, { ...options, connections }, (event) => got.push(event));
    expect(got).toEqual([{ t: "🚀" }, { t: "é" }]);
    // Both answers were complete and kept alive: one connection carried them.
    expect(connections.size).toBe(1);
    await connections.close();
  });

  it("does not reuse a connection answered with Connection: close, nor one the server closed while idle", async () => {
    routes.set("/close", (socket) => {
      socket.end(json(200, { closed: true }, "Connection: close\r\n"));
    });
    routes.set("/then-idle-close", (socket) => {
      socket.write(json(200, { n: 1 }));
      setTimeout(() => socket.end(), 20);
    });
    const connections = new EngineConnections();
    const first = accepted;
    expect(await requestJson("GET", `${base}/close`, undefined, { ...options, connections })).toEqual({
      closed: true,
    });
    expect(await requestJson("GET", `${base}/close`, undefined, { ...options, connections })).toEqual({
      closed: true,
    });
    expect(accepted - first).toBe(2);
    expect(
      await requestJson("GET", `${base}/then-idle-close`, undefined, { ...options, connections }),
    ).toEqual({
      n: 1,
    });
    await sleep(100);
    // Seen closing while idle, it was dropped rather than kept for the next request.
    expect(connections.size).toBe(0);
    const before = seen.get("/after-idle") ?? 0;
    expect(await requestJson("GET", `${base}/after-idle`, undefined, { ...options, connections })).toEqual({
      ok: true,
    });
    expect(seen.get("/after-idle")).toBe(before + 1);
    await connections.close();
  });

  it("sends once more, on a new connection, a request whose reused connection drops before any answer", async () => {
    // The keep-alive race: the server closes a connection just as the next request arrives on it.
    routes.set("/race", (socket, index) => {
      if (index === 0) socket.write(json(200, { first: true }));
      else socket.destroy();
    });
    const connections = new EngineConnections();
    expect(await requestJson("POST", `${base}/race`, {}, { ...options, connections })).toEqual({
      first: true,
    });
    const sent = seen.get("/race") ?? 0;
    expect(await requestJson("POST", `${base}/race`, {}, { ...options, connections })).toEqual({
      first: true,
    });
    expect(seen.get("/race")).toBe(sent + 2);
    // Dropped again on the new connection, it is not sent a third time: that is the engine failing.
    routes.set("/drop", (socket) => {
      socket.destroy();
    });
    const dropped = await failure(requestJson("POST", `${base}/drop`, {}, { ...options, connections }));
    expect(seen.get("/drop")).toBe(2);
    expect(dropped).toBeInstanceOf(EngineError);
    expect(dropped).toMatchObject({ status: null, message: expect.stringMatching(/^connection error \(/) });
    await connections.close();
  });

  it("fails malformed or cut-short answers with an EngineError that names the fault", async () => {
    routes.set("/bad-status", (socket) => void socket.write("HTTP/1.1 OK\r\n\r\n"));
    routes.set("/bad-header", (socket) => void socket.write("HTTP/1.1 200 OK\r\nno colon\r\n\r\n"));
    routes.set("/short", (socket) => {
      socket.end('HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"partial');
    });
    routes.set("/bad-chunk", (socket) => {
      socket.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nnothex\r\n");
    });
    routes.set("/until-close", (socket) => {
      socket.end('HTTP/1.1 200 OK\r\n\r\n{"read":"to the end"}');
    });
    const expected: Array<[string, string]> = [
      ["/bad-status", 'connection error (malformed status line "HTTP/1.1 OK")'],
      ["/bad-header", 'connection error (malformed header line "no colon")'],
      ["/short", "connection error (the connection closed before the end of the response body)"],
      ["/bad-chunk", 'connection error (malformed chunk size "nothex")'],
    ];
    for (const [path, message] of expected) {
      const error = await failure(requestJson("GET", `${base}${path}`, undefined, options));
      expect(error, path).toBeInstanceOf(EngineError);
      expect(error, path).toMatchObject({ message, status: null, retryable: true });
    }
    expect(await requestJson("GET", `${base}/until-close`, undefined, options)).toEqual({
      read: "to the end",
    });
  });

  it("refuses a header that would split the request", async () => {
    const error = await failure(
      requestJson("GET", `${base}/x`, undefined, { ...options, headers: { "x-bad": "a\r\nhost: evil" } }),
    );
    expect(error).toMatchObject({ message: 'connection error (invalid header "x-bad")', status: null });
  });

  it("rethrows the caller's abort reason mid-stream and closes the connection it leaves unread", async () => {
    let closed = false;
    routes.set("/endless", (socket) => {
      socket.on("close", () => {
        closed = true;
      });
      socket.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
      const line = 'data: {"n":1}\n\n';
      socket.write(`${line.length.toString(16)}\r\n${line}\r\n`);
    });
    const controller = new AbortController();
    const reason = new Error("rollout cancelled");
    const connections = new EngineConnections();
    const pending = failure(
      requestEvents(`${base}/endless`, {}, { ...options, connections, signal: controller.signal }, () =>
        controller.abort(reason),
      ),
    );
    expect(await pending).toBe(reason);
    while (!closed) await sleep(5);
    expect(connections.size).toBe(0);
  });
});

describe("deadlines on the sweep", () => {
  /** A clock paused from the start until `resume()`. */
  function pausedClock(): PauseClock & { resume(): void } {
    const since = Date.now();
    let paused = true;
    let total = 0;
    return {
      get paused() {
        return paused;
      },
      pausedMs: () => (paused ? Date.now() - since : total),
      onResume: () => () => {},
      resume() {
        total = Date.now() - since;
        paused = false;
      },
    };
  }

  it("holds a request's limit while its clock is paused and ends it once time counts again", async () => {
    routes.set("/hang", () => {});
    const clock = pausedClock();
    let settled = false;
    const pending = failure(requestJson("GET", `${base}/hang`, undefined, { timeoutMs: 50, clock })).finally(
      () => {
        settled = true;
      },
    );
    // Several sweeps pass the unpaused limit; paused time does not count.
    await sleep(400);
    expect(settled).toBe(false);
    clock.resume();
    expect(await pending).toMatchObject({ message: "request timed out after 0.05 s", status: null });
  });

  it("stretches deadline() the same way and reports only unpaused time as spent", async () => {
    const clock = pausedClock();
    const limit = deadline(50, undefined, clock);
    await sleep(400);
    expect(limit.signal.aborted).toBe(false);
    expect(limit.spentMs()).toBeLessThan(50);
    clock.resume();
    await once(limit.signal, "abort");
    expect(limit.expired).toBe(true);
    expect((limit.signal.reason as DOMException).name).toBe("TimeoutError");
    limit.dispose();
  });

  it("lets a disposed deadline go without aborting it", async () => {
    const limit = deadline(20);
    limit.dispose();
    await sleep(300);
    expect(limit.signal.aborted).toBe(false);
  });
});

describe("https", () => {
  // A throwaway self-signed certificate for 127.0.0.1, made with the openssl CLI.
  let dir: string | null = null;
  let key = "";
  let cert = "";
  try {
    dir = mkdtempSync(join(tmpdir(), "rollgym-tls-"));
    execFileSync(
      "openssl",
      [
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        join(dir, "key.pem"),
        "-out",
        join(dir, "cert.pem"),
        "-days",
        "1",
        "-subj",
        "/CN=127.0.0.1",
        "-addext",
        "subjectAltName=IP:127.0.0.1",
      ],
      { stdio: "ignore" },
    );
    key = readFileSync(join(dir, "key.pem"), "utf8");
    cert = readFileSync(join(dir, "cert.pem"), "utf8");
  } catch {
    key = "";
  } finally {
    if (dir !== null) rmSync(dir, { recursive: true, force: true });
  }

  it.skipIf(key === "")(
    "talks to an https engine over one keep-alive connection (skipped without the openssl CLI)",
    async () => {
      const secure = createHttpsServer({ key, cert }, (req, res) => {
        req.resume();
        req.on("end", () => {
          res.writeHead(200, { "content-type": "application/json" });
          res.end(JSON.stringify({ secure: true, path: req.url }));
        });
      });
      secure.listen(0, "127.0.0.1");
      await once(secure, "listening");
      const url = `https://127.0.0.1:${(secure.address() as AddressInfo).port}`;
      const connections = new EngineConnections({ ca: cert });
      try {
        for (let i = 0; i < 3; i++)
          expect(await requestJson("POST", `${url}/v1/x`, { i }, { ...options, connections })).toEqual({
            secure: true,
            path: "/v1/x",
          });
        expect(connections.size).toBe(1);
        // Without the CA the certificate is refused.
        const untrusted = await failure(requestJson("GET", `${url}/v1/x`, undefined, options));
        expect(untrusted).toMatchObject({
          status: null,
          message: expect.stringMatching(/^connection error \(.*self-signed/i),
        });
      } finally {
        await connections.close();
        secure.closeAllConnections();
        secure.close();
      }
    },
  );
});
