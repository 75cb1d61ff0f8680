// A pass-through HTTP proxy in front of an inference engine, for checking rollgym from the
// engine's side: it keeps every JSON request and answer, and can rewrite answers to play an
// engine that misbehaves.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { request } from "undici";

export interface Exchange {
  path: string;
  request: Record<string, unknown>;
  answer: Record<string, unknown>;
}

export interface EngineProxy {
  /** The proxy's root, e.g. `http://127.0.0.1:40123` (append `/v1`). */
  url: string;
  /** Every POST with a JSON body answered with 200, in order, after any rewrite. */
  log: Exchange[];
  /** Every request's method and path (with its query), in order. */
  requests: { method: string; path: string }[];
  /** Requests seen on `path`. */
  hits(path: string): number;
  close(): Promise<void>;
}

/** `rewrite` may change a 200 answer to a POST in place (it sees the route and the request). */
export async function engineProxy(
  target: string,
  rewrite?: (exchange: Exchange) => void,
): Promise<EngineProxy> {
  const log: Exchange[] = [];
  const requests: { method: string; path: string }[] = [];
  const counts = new Map<string, number>();
  const server: Server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks).toString("utf8");
    const path = req.url ?? "";
    requests.push({ method: req.method ?? "", path });
    counts.set(path, (counts.get(path) ?? 0) + 1);
    const answer = await request(`${target}${path}`, {
      method: req.method as "GET" | "POST",
      headers: { "content-type": "application/json" },
      body: req.method === "POST" ? body : undefined,
    });
    let text = await answer.body.text();
    // Control routes (/pause, /resume) carry no body.
    if (req.method === "POST" && answer.statusCode === 200 && body !== "") {
      const exchange = { path, request: JSON.parse(body), answer: JSON.parse(text) };
      rewrite?.(exchange);
      log.push(exchange);
      text = JSON.stringify(exchange.answer);
    }
    res.writeHead(answer.statusCode, { "content-type": "application/json" });
    res.end(text);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    log,
    requests,
    hits: (path) => counts.get(path) ?? 0,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
