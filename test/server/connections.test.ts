// Connection caps and timeouts (docs/server.md "Connections"): what a client observes when it
// holds sockets without using them. Small limits and timeouts are configured per test; the
// assertions are on close codes, HTTP statuses and closed sockets, never on elapsed time.
import { connect, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { CLOSE_CODES } from "../../protocol/codec.ts";
import { buildServer, type RollgymServer, type ServerOptions } from "../../src/server/app.ts";
import { ConnectionGuard, UPGRADES_PER_TURN } from "../../src/server/connections.ts";
import { TestClient } from "../helpers/ws-client.ts";

let server: RollgymServer | null = null;
afterEach(async () => {
  await server?.shutdown();
  server = null;
});

async function start(options: ServerOptions): Promise<string> {
  server = await buildServer(options);
  return server.listen();
}

/** An upgrade the server refuses: its HTTP status and JSON body. */
function refusedUpgrade(
  url: string,
  options: { localAddress?: string } = {},
): Promise<{ status: number; body: { error: { message: string } } }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`${url.replace(/^http/, "ws")}/v1/rollouts`, options);
    ws.once("open", () => reject(new Error("the upgrade was accepted")));
    ws.once("unexpected-response", (_request, response) => {
      let body = "";
      response.setEncoding("utf8");
      response.on("data", (chunk: string) => (body += chunk));
      response.on("end", () => resolve({ status: response.statusCode ?? 0, body: JSON.parse(body) }));
    });
    ws.once("error", () => {});
  });
}

/** A raw TCP connection to the server: what it received, and a promise of its close. */
function rawSocket(url: string): { socket: Socket; received: () => string; closed: Promise<void> } {
  const { hostname, port } = new URL(url);
  const socket = connect(Number(port), hostname);
  let received = "";
  socket.setEncoding("utf8").on("data", (chunk: string) => (received += chunk));
  socket.on("error", () => {});
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  return { socket, received: () => received, closed };
}

async function connected(socket: Socket): Promise<void> {
  if (!socket.connecting) return;
  await new Promise((resolve) => socket.once("connect", resolve));
}

describe("WebSocket connection caps", () => {
  it("refuses upgrades past max_connections with 503 and a JSON body naming the limit; /healthz still answers", async () => {
    const url = await start({ connections: { maxConnections: 2 } });
    const first = await TestClient.connect(url);
    const second = await TestClient.connect(url);
    expect(first.of("welcome")[0]).toMatchObject({
      limits: { max_connections: 2, max_connections_per_address: 256, hello_timeout_s: 10 },
    });
    const refused = await refusedUpgrade(url);
    expect(refused.status).toBe(503);
    expect(refused.body.error.message).toContain("max_connections is 2");
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
    // A place that frees up is taken again.
    first.close();
    await first.closed();
    const third = await TestClient.connect(url);
    expect(third.of("welcome")).toHaveLength(1);
    second.close();
    third.close();
  });

  it("refuses upgrades past max_connections_per_address; other addresses still connect", async () => {
    const url = await start({ connections: { maxConnectionsPerAddress: 1 } });
    const first = await TestClient.connect(url);
    const refused = await refusedUpgrade(url);
    expect(refused.status).toBe(503);
    expect(refused.body.error.message).toContain("max_connections_per_address is 1");
    // 127.0.0.2 is another loopback address on Linux.
    const other = new WebSocket(`${url.replace(/^http/, "ws")}/v1/rollouts`, { localAddress: "127.0.0.2" });
    await new Promise((resolve, reject) => {
      other.once("open", resolve);
      other.once("unexpected-response", (_q, r) => reject(new Error(`HTTP ${r.statusCode}`)));
      other.once("error", reject);
    });
    other.close();
    first.close();
  });
});

describe("silent sockets", () => {
  it("closes a WebSocket that sends no hello within hello_timeout_s with 4010; one that did is untouched", async () => {
    const url = await start({ connections: { helloTimeoutMs: 200 } });
    const talker = await TestClient.connect(url);
    const silent = await TestClient.connect(url, { hello: null });
    await silent.closed();
    expect(silent.closeCode).toBe(CLOSE_CODES.helloTimeout);
    expect(silent.closeReason).toContain("no hello within 0.2 s");
    // The client that said hello still works.
    talker.send({
      type: "rollout",
      id: "r",
      tags: [{ tag: "Bandit", groups: 1 }],
      mode: "val",
      group_size: 1,
      delivery: "batch",
    });
    talker.send({ type: "credit", groups: 1 });
    expect(await talker.next((f) => f.type === "batch")).toMatchObject({ rollout: "r" });
    expect(talker.closeCode).toBeNull();
    talker.close();
  });

  it("closes a half-sent upgrade request after the headers timeout (also before the token check)", async () => {
    const url = await start({ token: "secret", connections: { headersTimeoutMs: 300 } });
    const half = rawSocket(url);
    half.socket.write("GET /v1/rollouts HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n");
    await half.closed;
    expect(half.received()).toMatch(/^HTTP\/1\.1 408/);
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
  });

  it("past max_pending_connections drops the oldest silent connection first, so /healthz still answers", async () => {
    const url = await start({ connections: { maxPendingConnections: 3 } });
    const silent: ReturnType<typeof rawSocket>[] = [];
    for (let i = 0; i < 3; i++) {
      silent.push(rawSocket(url));
      await connected(silent[i].socket);
    }
    const hello = await TestClient.connect(url, { hello: null }); // a fourth: drops the oldest
    await silent[0].closed;
    // /healthz comes in on a fifth connection: it drops the next oldest and is answered.
    const health = await fetch(`${url}/healthz`);
    expect(health.status).toBe(200);
    await silent[1].closed;
    // A WebSocket without hello is pending too: more silent connections drop it with 4010.
    const later = [rawSocket(url), rawSocket(url), rawSocket(url), rawSocket(url)];
    await hello.closed();
    expect(hello.closeCode).toBe(CLOSE_CODES.helloTimeout);
    expect(hello.closeReason).toContain("waiting for their hello");
    for (const s of [...silent, ...later]) s.socket.destroy();
  });
});

describe("a storm of handshakes", () => {
  it(`completes at most ${UPGRADES_PER_TURN} per turn of the event loop, in arrival order, so other work runs between`, async () => {
    const guard = new ConnectionGuard();
    const done: number[] = [];
    const seenBetween: number[] = [];
    for (let i = 0; i < 40; i++) guard.upgrade(() => done.push(i));
    expect(done).toHaveLength(UPGRADES_PER_TURN);
    // Work queued now (like a /healthz request read meanwhile) runs before the rest of the storm.
    await new Promise<void>((resolve) =>
      setImmediate(() => {
        seenBetween.push(done.length);
        resolve();
      }),
    );
    while (done.length < 40) await new Promise((r) => setImmediate(r));
    expect(seenBetween[0]).toBeLessThan(40);
    expect(done).toEqual(Array.from({ length: 40 }, (_, i) => i));
    // And an upgrade after the storm runs at once again.
    await new Promise((r) => setImmediate(r));
    guard.upgrade(() => done.push(40));
    expect(done).toHaveLength(41);
  });

  it("welcomes 200 clients connecting at once", async () => {
    const url = await start({});
    const clients = await Promise.all(Array.from({ length: 200 }, () => TestClient.connect(url)));
    expect(clients.filter((c) => c.of("welcome").length === 1)).toHaveLength(200);
    expect(await (await fetch(`${url}/healthz`)).json()).toMatchObject({ status: "ok" });
    for (const c of clients) c.close();
  });
});
