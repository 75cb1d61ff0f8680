// One keep-alive HTTP/1.1 connection to an engine, on node:net (node:tls for https): it writes a
// request in one write and hands the parsed answer to whoever sent it. One request at a time,
// no pipelining. Listeners are attached once per connection, not per request.
//
// Sockets are unref'd: an idle connection never keeps the process alive. A request in flight
// does, through the deadline sweep's timer (deadline.ts), which runs while any request is timed.
import { connect as connectTcp, isIP, type Socket } from "node:net";
import { type ConnectionOptions, connect as connectTls } from "node:tls";
import { ResponseParser, type ResponseSink } from "./http-response.ts";

/** Who a request's answer goes to. */
export interface SocketUser {
  head(status: number, retryAfter: string | null): void;
  body(chunk: Buffer, start: number, end: number): void;
  /** The answer is complete; the connection is free again (or closed, if not `reusable`). */
  done(socket: EngineSocket, reusable: boolean): void;
  /** The connection failed with the request in flight (already closed); `answered`: bytes had come. */
  failed(error: Error, answered: boolean): void;
}

/** Where connections go: one scheme, host and port, and its free connections, newest last. */
export class Origin {
  readonly idle: EngineSocket[] = [];
  readonly secure: boolean;
  /** The name or address to connect to (IPv6 without brackets). */
  readonly host: string;
  readonly port: number;
  /** The Host header: host[:port] as the URL spells it. */
  readonly hostHeader: string;

  constructor(origin: string) {
    const url = new URL(origin);
    if (url.protocol !== "http:" && url.protocol !== "https:")
      throw new Error(`${origin}: an engine URL starts with http:// or https://`);
    this.secure = url.protocol === "https:";
    this.hostHeader = url.host;
    this.host = url.hostname.startsWith("[") ? url.hostname.slice(1, -1) : url.hostname;
    this.port = url.port === "" ? (this.secure ? 443 : 80) : Number(url.port);
  }
}

export class EngineSocket implements ResponseSink {
  private readonly socket: Socket;
  private readonly parser = new ResponseParser(this);
  private user: SocketUser | null = null;
  private answered = false;
  /** Answers this connection has carried to the end. */
  served = 0;
  /** Closed or closing: never to be used again. */
  closed = false;

  readonly origin: Origin;

  constructor(origin: Origin, tls: ConnectionOptions | undefined, onClose: (socket: EngineSocket) => void) {
    this.origin = origin;
    const { host, port } = origin;
    this.socket = origin.secure
      ? connectTls({
          host,
          port,
          // SNI takes a name, never an address.
          ...(isIP(host) === 0 ? { servername: host } : {}),
          ALPNProtocols: ["http/1.1"],
          ...tls,
        })
      : connectTcp({ host, port });
    this.socket.setNoDelay(true);
    this.socket.setKeepAlive(true, 60_000);
    this.socket.unref();
    this.socket.on("data", (data: Buffer) => this.read(data));
    this.socket.on("end", () => this.ended());
    this.socket.on("error", (error: Error) => this.fail(error));
    this.socket.on("close", () => {
      this.closed = true;
      this.fail(new Error("the connection closed"));
      onClose(this);
    });
  }

  /** Sends one request (the whole of it: head and body); its answer goes to `user`. */
  send(request: string, user: SocketUser): void {
    this.user = user;
    this.answered = false;
    this.parser.reset();
    this.socket.write(request);
  }

  /** Closes the connection; a request in flight on it hears no more of it. */
  destroy(): void {
    this.user = null;
    this.closed = true;
    this.socket.destroy();
  }

  /** Closes the connection and fails the request in flight on it with `error`. */
  fail(error: Error): void {
    const user = this.user;
    this.destroy();
    user?.failed(error, this.answered);
  }

  private read(data: Buffer): void {
    if (this.user === null) {
      // Bytes nobody asked for: the connection is out of step and cannot be trusted.
      this.destroy();
      return;
    }
    this.answered = true;
    try {
      this.parser.push(data);
    } catch (error) {
      this.fail(error as Error);
    }
  }

  /** The server closed its side: an idle connection is dropped; an answer read to the close ends. */
  private ended(): void {
    if (this.user === null) {
      this.destroy();
      return;
    }
    try {
      this.parser.end();
    } catch (error) {
      this.fail(error as Error);
    }
  }

  head(status: number, retryAfter: string | null): void {
    this.user?.head(status, retryAfter);
  }

  body(chunk: Buffer, start: number, end: number): void {
    this.user?.body(chunk, start, end);
  }

  done(reusable: boolean): void {
    const user = this.user;
    this.user = null;
    this.served++;
    if (!reusable) this.destroy();
    user?.done(this, reusable);
  }
}
