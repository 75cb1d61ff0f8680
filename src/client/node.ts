// The protocol client in Node, over `ws`: what a browser cannot do (an authorization header,
// a chosen local address, the upgrade's HTTP status, reading paused) happens here, and the
// protocol itself in protocol-client.ts.
import type { Socket } from "node:net";
import WebSocket from "ws";
import { type ClientOptions, type Frame, ProtocolClient } from "./protocol-client.ts";

export interface ConnectOptions extends ClientOptions {
  /** Sent as `authorization: Bearer …`. */
  token?: string | null;
  /** Sent as `?token=` (as a browser sends it). */
  queryToken?: string;
  /** Another loopback address (127.0.0.2, …) is another remote address to the server. */
  localAddress?: string;
  /** Offer permessage-deflate (`ws`'s default: true). */
  perMessageDeflate?: boolean;
  /** The largest frame accepted, 0 for no limit (`ws`'s default: 100 MiB). */
  maxPayload?: number;
}

/** The server answered the upgrade with an HTTP status instead of a WebSocket. */
export class UpgradeRefused extends Error {
  readonly status: number;
  constructor(status: number) {
    super(`HTTP ${status}`);
    this.status = status;
  }
}

export class NodeClient extends ProtocolClient<WebSocket> {
  // ws hands each frame as a Buffer.
  declare readonly raw: Buffer[];

  /** The `ws` socket, for what the protocol does not cover (listeners, terminate, bufferedAmount). */
  get ws(): WebSocket {
    return this.socket;
  }

  /**
   * Opens a WebSocket to `url` (http://HOST:PORT) and, unless `hello` is null, says hello and
   * waits for the answer (welcome or error: the caller reads it). Rejects with the socket's
   * error, or UpgradeRefused.
   */
  static async connect(
    url: string,
    hello: Frame | null,
    options: ConnectOptions = {},
  ): Promise<{ client: NodeClient; answer: Frame | null }> {
    const headers = options.token ? { authorization: `Bearer ${options.token}` } : undefined;
    const query = options.queryToken ? `?token=${encodeURIComponent(options.queryToken)}` : "";
    const ws = new WebSocket(`${url.replace(/^http/, "ws").replace(/\/+$/, "")}/v1/rollouts${query}`, {
      headers,
      localAddress: options.localAddress,
      ...(options.perMessageDeflate === undefined ? {} : { perMessageDeflate: options.perMessageDeflate }),
      ...(options.maxPayload === undefined ? {} : { maxPayload: options.maxPayload }),
    });
    await new Promise<void>((resolve, reject) => {
      ws.once("open", () => resolve());
      ws.once("error", reject);
      ws.once("unexpected-response", (_req, res) => reject(new UpgradeRefused(res.statusCode ?? 0)));
    });
    const client = new NodeClient(ws, options);
    return { client, answer: hello === null ? null : await client.hello(hello) };
  }

  /** Stops reading the socket: the kernel's buffers fill, then the server's (a client that never reads). */
  pauseReading(): void {
    (this.ws as unknown as { _socket: Socket })._socket.pause();
  }

  resumeReading(): void {
    (this.ws as unknown as { _socket: Socket })._socket.resume();
  }
}
