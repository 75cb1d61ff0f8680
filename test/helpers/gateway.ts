// A streaming HTTP gateway in front of an engine, for tests that shape what reaches it: it
// records each request's path and JSON body, can answer 404 outside /v1/* (as API gateways that
// forward only the OpenAI routes do), and can hold generation requests on their way until the
// test lets them go (a request still on the wire when a pause lands). Answers pass through as
// they come, server-sent events included.
import { once } from "node:events";
import { createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export interface Gateway {
  /** The gateway's base URL, ending in /v1 like an engine's. */
  url: string;
  /**
   * Every request that arrived, in order: its path, its JSON body (null when none) and, once
   * the engine's answer has passed through whole, its status and text.
   */
  seen: Exchange[];
  /** From now on, POSTs to paths ending in `suffix` wait in the gateway until release(). */
  hold(suffix: string): void;
  /** Requests waiting in the gateway now. */
  readonly held: number;
  /** Forwards every waiting request and holds no more. */
  release(): void;
  close(): Promise<void>;
}

export interface Exchange {
  path: string;
  body: unknown;
  answer?: { status: number; text: string };
}

export async function startGateway(target: string, options: { v1Only?: boolean } = {}): Promise<Gateway> {
  const upstream = new URL(target);
  const seen: Gateway["seen"] = [];
  let holding: string | null = null;
  let waiting: (() => void)[] = [];

  const forward = (req: IncomingMessage, res: ServerResponse, body: Buffer, exchange: Exchange): void => {
    const out = httpRequest(
      {
        host: upstream.hostname,
        port: upstream.port,
        path: req.url,
        method: req.method,
        headers: req.headers,
      },
      (answer) => {
        const status = answer.statusCode ?? 502;
        res.writeHead(status, answer.headers);
        const parts: Buffer[] = [];
        answer.on("data", (part: Buffer) => parts.push(part));
        answer.on("end", () => {
          exchange.answer = { status, text: Buffer.concat(parts).toString("utf8") };
        });
        answer.pipe(res);
      },
    );
    out.on("error", () => {
      if (!res.headersSent) res.writeHead(502);
      res.end();
    });
    // The client going away (an abort) ends the forwarded request too.
    res.on("close", () => {
      if (!res.writableFinished) out.destroy();
    });
    out.end(body);
  };

  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks);
    const path = req.url ?? "";
    const exchange: Exchange = { path, body: body.length > 0 ? JSON.parse(body.toString("utf8")) : null };
    seen.push(exchange);
    if (options.v1Only && !path.startsWith("/v1/")) {
      res.writeHead(404, { "content-type": "text/plain" }).end("Not Found");
      return;
    }
    if (holding !== null && req.method === "POST" && path.endsWith(holding)) {
      waiting.push(() => forward(req, res, body, exchange));
      return;
    }
    forward(req, res, body, exchange);
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    seen,
    hold(suffix) {
      holding = suffix;
    },
    get held() {
      return waiting.length;
    },
    release() {
      holding = null;
      const go = waiting;
      waiting = [];
      for (const send of go) send();
    },
    close: async () => {
      server.closeAllConnections();
      server.close();
    },
  };
}
