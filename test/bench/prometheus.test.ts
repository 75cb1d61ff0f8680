// The bench's /metrics reads: one failed read is tried once more, a second failure names both;
// a read that timed out is not tried again.
import { once } from "node:events";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, expect, it, onTestFinished } from "vitest";
import { scrape } from "../../src/bench/prometheus.ts";

/** A /metrics server answering each request with the next status of `statuses` (200 after them; 0: never). */
async function metricsServer(
  statuses: number[],
): Promise<{ url: string; requests: () => number; connections: () => number }> {
  let requests = 0;
  let connections = 0;
  const server: Server = createServer((_req, res) => {
    const status = statuses[requests++] ?? 200;
    if (status === 0) return;
    // As Node answers a request it timed out: 408 and the connection closed.
    if (status !== 200) res.writeHead(status, { connection: "close" }).end();
    else res.writeHead(200, { "content-type": "text/plain" }).end('vllm:num_requests_running{m="a"} 3\n');
  });
  server.on("connection", () => connections++);
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  onTestFinished(() => {
    server.closeAllConnections();
    server.close();
  });
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/metrics`,
    requests: () => requests,
    connections: () => connections,
  };
}

describe("scrape", () => {
  it("reads the counters on the second try after a 408", async () => {
    const engine = await metricsServer([408]);
    const samples = await scrape(engine.url);
    expect(samples.get("vllm:num_requests_running")).toBe(3);
    expect(engine.requests()).toBe(2);
  });

  it("fails after two failed tries, naming the URL and both statuses", async () => {
    const engine = await metricsServer([408, 503]);
    await expect(scrape(engine.url)).rejects.toThrow(
      `GET ${engine.url}: HTTP 503 (tried twice; first: GET ${engine.url}: HTTP 408)`,
    );
    expect(engine.requests()).toBe(2);
  });

  it("reads over one kept-alive connection, so a busy engine's full accept queue is not in the way", async () => {
    const engine = await metricsServer([]);
    for (let i = 0; i < 3; i++) await scrape(engine.url);
    expect([engine.requests(), engine.connections()]).toEqual([3, 1]);
  });

  it("does not try a read that timed out again: it has waited its time already", async () => {
    const engine = await metricsServer([0, 0]);
    await expect(scrape(engine.url, 200)).rejects.toThrow(`GET ${engine.url}: `);
    await expect(scrape(engine.url, 200)).rejects.toThrow("(no answer in 0.2 s)");
    expect(engine.requests()).toBe(2);
  });
});
