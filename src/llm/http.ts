// JSON over HTTP for inference engines. The `openai` SDK drops the message of vLLM's older
// flat error body ({"object":"error","message":…}: it reads only body.error), and token mode
// needs routes it does not cover (/tokenize, llama.cpp's /completion), so engine requests go
// through this small wrapper instead. It sends on keep-alive HTTP/1.1 connections of its own
// (engine-socket.ts) rather than with fetch or undici: at 1,024 requests in flight undici's
// Client cost 2.7 times the CPU of a bare socket per request (bench/http-client.ts), and fetch
// about four times undici's (README).

import { StringDecoder } from "node:string_decoder";
import type { ConnectionOptions } from "node:tls";
import { RollgymError } from "../errors/catalogue.ts";
import {
  joinParent,
  leaveParent,
  type ParentChild,
  type PauseClock,
  type Timed,
  unwatch,
  watch,
} from "./deadline.ts";
import { EngineSocket, Origin, type SocketUser } from "./engine-socket.ts";

/** An engine request that did not produce a usable answer. */
export class EngineError extends RollgymError<"engine_failed"> {
  /** HTTP status, or null when no response arrived (connection refused/reset, timeout). */
  readonly status: number | null;
  /** Seconds the server asked us to wait (Retry-After), when it said. */
  readonly retryAfterS: number | null;
  private readonly fault: boolean | undefined;
  constructor(
    message: string,
    status: number | null,
    retryAfterS: number | null = null,
    replicaFault?: boolean,
  ) {
    super("engine_failed", { message });
    this.name = "EngineError";
    this.status = status;
    this.retryAfterS = retryAfterS;
    this.fault = replicaFault;
  }

  /** Worth another attempt: no answer, a timeout, 408/409/429 or a 5xx. */
  get retryable(): boolean {
    const s = this.status;
    return s === null || s === 408 || s === 409 || s === 429 || s >= 500;
  }

  /** Counts toward taking the replica out: no answer or a 5xx, unless said otherwise (aborts). */
  get replicaFault(): boolean {
    return this.fault ?? (this.status === null || this.status >= 500);
  }
}

/**
 * A 2xx answer that cannot be used (a missing field, logprobs that do not fit the tokens). The
 * same request gives the same answer (same prompt, same per-request seed), so it is tried once
 * more at most, in case a proxy garbled it, and never for the whole retry budget. Not the
 * replica's fault: it stays in routing.
 */
export class UnusableAnswer extends EngineError {
  constructor(message: string) {
    super(message, 502, null, false);
    this.name = "UnusableAnswer";
  }
}

/**
 * A request body already serialised as JSON, sent as is: a caller that extends one history
 * turn after turn keeps its text instead of serialising the whole history again.
 */
export class JsonText {
  readonly text: string;
  /** Its UTF-8 byte length when the caller counted it as it built the text, else undefined. */
  readonly bytes: number | undefined;
  // Not parameter properties: Node's type stripping refuses them (erasableSyntaxOnly).
  constructor(text: string, bytes?: number) {
    this.text = text;
    this.bytes = bytes;
  }
}

/** The JSON text of a request body. */
function bodyText(body: unknown): string {
  return body instanceof JsonText ? body.text : JSON.stringify(body);
}

/** The UTF-8 byte length of a body's text: the one its JsonText carries, or counted. */
function bodyBytes(body: unknown, text: string): number {
  return body instanceof JsonText && body.bytes !== undefined ? body.bytes : utf8Length(text);
}

export interface RequestOptions {
  signal?: AbortSignal;
  timeoutMs: number;
  headers?: Record<string, string>;
  /** The connections to send on (a policy's own); default: one set shared by all callers. */
  connections?: EngineConnections;
  /** Time paused on it (a weight update) does not count against timeoutMs. */
  clock?: PauseClock;
  /** Reads a 2xx answer's bytes in place of JSON.parse of their text; undefined when it is not JSON. */
  parse?: (body: Buffer) => unknown;
}

/**
 * Keep-alive connections to engine replicas: one per request in flight, reused newest first,
 * so idle ones are closed by the server's keep-alive timeout and busy ones stay warm. undici's
 * Pool (and Node's fetch, built on it) looks for a free connection by scanning all of them on
 * every dispatch, which at 10,000 connections costs more than the request itself; here taking
 * and returning one is O(1). The replica pool's in-flight cap bounds their number. There is no
 * header or body timeout: the request's own deadline times it (a long generation may take
 * minutes to its first byte).
 */
export class EngineConnections {
  private readonly origins = new Map<string, Origin>();
  private readonly all = new Set<EngineSocket>();
  private closed = false;
  private readonly forget = (socket: EngineSocket): void => {
    this.all.delete(socket);
  };

  private readonly tls: ConnectionOptions | undefined;

  /** `tls`: options for https engines (a private CA, say); Node's defaults otherwise. */
  constructor(tls?: ConnectionOptions) {
    this.tls = tls;
  }

  /**
   * A free connection to the origin `url` starts with. One the server closed while idle stays
   * in its stack until it comes up here and is skipped (the stack is no deeper than the most
   * requests ever in flight to the origin).
   */
  take(url: string): EngineSocket {
    const origin = this.originOf(url);
    for (let reused = origin.idle.pop(); reused !== undefined; reused = origin.idle.pop())
      if (!reused.closed) return reused;
    return this.open(origin);
  }

  /** A new connection to `origin`, never an idle one (a retry after a stale connection failed). */
  open(origin: Origin): EngineSocket {
    if (this.closed) throw new Error("the engine connections are closed");
    const socket = new EngineSocket(origin, this.tls, this.forget);
    this.all.add(socket);
    return socket;
  }

  /** Gives a connection back once its answer has been read. */
  give(socket: EngineSocket): void {
    if (this.closed || socket.closed) socket.destroy();
    else socket.origin.idle.push(socket);
  }

  /** Connections open or opening, for tests and metrics. */
  get size(): number {
    return this.all.size;
  }

  /** Closes every connection; requests still running on one fail. */
  async close(): Promise<void> {
    this.closed = true;
    for (const origin of this.origins.values()) origin.idle.length = 0;
    const sockets = [...this.all];
    this.all.clear();
    for (const socket of sockets) socket.fail(new Error("the engine connections were closed"));
  }

  private originOf(url: string): Origin {
    if (this.closed) throw new Error("the engine connections are closed");
    const key = originOf(url);
    let origin = this.origins.get(key);
    if (origin === undefined) {
      origin = new Origin(key);
      this.origins.set(key, origin);
    }
    return origin;
  }
}

/** "http://host:port" of "http://host:port/path" (engine URLs are absolute http(s) URLs). */
function originOf(url: string): string {
  const slash = url.indexOf("/", url.indexOf("//") + 2);
  return slash === -1 ? url : url.slice(0, slash);
}

let sharedConnections: EngineConnections | null = null;

/** The connections of callers that bring none (preflight helpers, scripts). */
function shared(): EngineConnections {
  sharedConnections ??= new EngineConnections();
  return sharedConnections;
}

/** Seconds from a Retry-After header: delta-seconds or an HTTP date. */
export function parseRetryAfter(value: string | null, now = Date.now()): number | null {
  if (value === null || value.trim() === "") return null;
  const seconds = Number(value.trim());
  if (Number.isFinite(seconds)) return Math.max(0, seconds);
  const date = Date.parse(value);
  return Number.isNaN(date) ? null : Math.max(0, (date - now) / 1000);
}

/** The message of an error body in vLLM's current (`{"error":{…}}`) or older flat shape, or llama.cpp's. */
export function errorMessage(body: unknown, fallback: string): string {
  if (typeof body !== "object" || body === null) return fallback;
  const record = body as Record<string, unknown>;
  const inner =
    typeof record.error === "object" && record.error !== null
      ? (record.error as Record<string, unknown>)
      : record;
  const message = inner.message ?? (typeof record.error === "string" ? record.error : undefined);
  if (typeof message === "string" && message !== "") return message;
  if (message !== undefined) return JSON.stringify(message);
  // FastAPI's own validation errors: {"detail": …}
  if (record.detail !== undefined)
    return typeof record.detail === "string" ? record.detail : JSON.stringify(record.detail);
  return fallback;
}

function describeCause(error: unknown): string {
  const cause = error instanceof Error && error.cause instanceof Error ? error.cause : error;
  const code = (cause as { code?: unknown } | null)?.code;
  const text = cause instanceof Error ? cause.message : String(cause);
  return typeof code === "string" && !text.includes(code) ? `${code}: ${text}` : text;
}

/** A header name (an HTTP token) and a value without line breaks: anything else could split the request. */
const HEADER_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const HEADER_VALUE = /[\r\n\0]/;

/** The request's bytes: request line, headers and body, for one socket write. */
function requestText(
  method: string,
  url: string,
  origin: Origin,
  /** The body's JSON text (bodyText); none for a request without a body. */
  text: string | undefined,
  /** Its UTF-8 byte length (bodyBytes). */
  bytes: number,
  headers?: Record<string, string>,
): string {
  const pathStart = url.indexOf("/", url.indexOf("//") + 2);
  const path = pathStart === -1 ? "/" : url.slice(pathStart);
  if (HEADER_VALUE.test(path) || path.includes(" "))
    throw new Error(`invalid request path ${JSON.stringify(path)}`);
  let head = `${method} ${path} HTTP/1.1\r\nhost: ${origin.hostHeader}\r\nconnection: keep-alive\r\n`;
  let typed = false;
  if (headers !== undefined)
    for (const name in headers) {
      const value = headers[name];
      if (!HEADER_NAME.test(name) || HEADER_VALUE.test(value))
        throw new Error(`invalid header ${JSON.stringify(name)}`);
      if (name.length === 12 && name.toLowerCase() === "content-type") typed = true;
      head += `${name}: ${value}\r\n`;
    }
  if (text === undefined) return method === "GET" ? `${head}\r\n` : `${head}content-length: 0\r\n\r\n`;
  if (!typed) head += "content-type: application/json\r\n";
  return `${head}content-length: ${bytes}\r\n\r\n${text}`;
}

/**
 * Buffer.byteLength of `text` without flattening it: Buffer.byteLength flattens a concatenated
 * string in place, and a body's text is one (an episode's history joined with its new turn).
 * Measured through a wrapper, the flat copy is the wrapper's, garbage at once, and the text an
 * Exchange keeps stays a rope of strings its episode holds anyway.
 */
export function utf8Length(text: string): number {
  return Buffer.byteLength(`${text} `) - 1;
}

/**
 * One request and its answer: whole (requestJson), or (with `onEvent`, for a 2xx) as
 * server-sent events, each `data:` line's JSON handed over as it arrives. Fails with EngineError
 * when no usable answer comes; with the caller's abort reason unchanged when `signal` aborts,
 * even mid-stream. Its deadline is on the sweep (deadline.ts), its parent link one entry in the
 * parent's set: no timer, controller or listener of its own. A connection it leaves unread (an
 * abort, a timeout, a bad event) is closed, never given back.
 */
class Exchange implements SocketUser, Timed, ParentChild {
  readonly started = Date.now();
  readonly pausedAtStart: number;
  readonly timeoutMs: number;
  readonly clock: PauseClock | undefined;
  sweepSlot = -1;
  readonly promise: Promise<unknown>;
  private resolve!: (value: unknown) => void;
  private reject!: (error: unknown) => void;
  private readonly signal: AbortSignal | undefined;
  private socket: EngineSocket | null = null;
  /**
   * What the request is made of, to send it again on a fresh connection (failed below). Not the
   * request's text: the socket write flattens that into a copy of the whole body, which would
   * stay for as long as the answer takes (3.8 KiB a request in the bench's Sokoban chat).
   */
  private method = "";
  private url = "";
  private bodyJson: string | undefined;
  private bodyLength = 0;
  private headers: Record<string, string> | undefined;
  private settled = false;
  private expired = false;
  private retried = false;
  private status = 0;
  private retryAfter: string | null = null;
  /** The body's first part, kept as a range of the bytes read (most answers come in one). */
  private first: Buffer | null = null;
  private firstStart = 0;
  private firstEnd = 0;
  private parts: Buffer[] | null = null;
  /** Streaming: UTF-8 decoded across chunk boundaries, and the line not complete yet. */
  private decoder: StringDecoder | null = null;
  private pendingLine = "";

  private readonly connections: EngineConnections;
  private readonly onEvent: ((event: unknown) => void) | undefined;
  private readonly parse: ((body: Buffer) => unknown) | undefined;

  constructor(
    connections: EngineConnections,
    options: RequestOptions,
    onEvent: ((event: unknown) => void) | undefined,
  ) {
    this.connections = connections;
    this.onEvent = onEvent;
    this.parse = options.parse;
    this.timeoutMs = options.timeoutMs;
    this.clock = options.clock;
    this.signal = options.signal;
    this.pausedAtStart = options.clock?.pausedMs() ?? 0;
    this.promise = new Promise((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
  }

  start(method: string, url: string, body: unknown, headers: Record<string, string> | undefined): void {
    const signal = this.signal;
    if (signal?.aborted) {
      this.settled = true;
      this.reject(signal.reason);
      return;
    }
    watch(this);
    if (signal !== undefined) joinParent(signal, this);
    let socket: EngineSocket | null = null;
    let request: string;
    let text: string | undefined;
    let bytes = 0;
    try {
      socket = this.connections.take(url);
      if (body !== undefined) {
        text = bodyText(body);
        bytes = bodyBytes(body, text);
      }
      request = requestText(method, url, socket.origin, text, bytes, headers);
    } catch (error) {
      // Nothing was written on it: a connection taken stays usable.
      if (socket !== null) this.connections.give(socket);
      this.fail(error);
      return;
    }
    this.method = method;
    this.url = url;
    this.bodyJson = text;
    this.bodyLength = bytes;
    this.headers = headers;
    this.socket = socket;
    socket.send(request, this);
  }

  head(status: number, retryAfter: string | null): void {
    this.status = status;
    this.retryAfter = retryAfter;
    if (this.onEvent !== undefined && status >= 200 && status <= 299)
      this.decoder = new StringDecoder("utf8");
  }

  body(chunk: Buffer, start: number, end: number): void {
    if (this.decoder !== null) {
      const lines = (this.pendingLine + this.decoder.write(chunk.subarray(start, end))).split("\n");
      this.pendingLine = lines.pop() ?? "";
      for (const line of lines) readEvent(line, this.onEvent as (event: unknown) => void);
    } else if (this.first === null) {
      this.first = chunk;
      this.firstStart = start;
      this.firstEnd = end;
    } else {
      this.parts ??= [this.first.subarray(this.firstStart, this.firstEnd)];
      this.parts.push(chunk.subarray(start, end));
    }
  }

  done(socket: EngineSocket, reusable: boolean): void {
    this.socket = null;
    if (reusable) this.connections.give(socket);
    if (this.settled) return;
    const { status } = this;
    if (this.decoder !== null) {
      try {
        readEvent(this.pendingLine + this.decoder.end(), this.onEvent as (event: unknown) => void);
      } catch (error) {
        this.fail(error);
        return;
      }
      this.succeed(undefined);
      return;
    }
    if (status < 200 || status > 299) {
      this.fail(statusError(status, this.retryAfter, this.text()));
      return;
    }
    if (this.onEvent !== undefined) {
      this.succeed(undefined);
      return;
    }
    const parsed = this.parse !== undefined ? this.parse(this.bytes()) : parseBody(this.text());
    if (parsed === undefined)
      this.fail(new EngineError(`HTTP ${status}: the body is not JSON (${this.text().slice(0, 100)})`, 502));
    else this.succeed(parsed);
  }

  failed(error: Error, answered: boolean): void {
    const socket = this.socket;
    this.socket = null;
    if (this.settled) return;
    // A reused connection the server closed as we wrote (its keep-alive timeout) fails before
    // any byte of an answer: the request is sent once more, on a new connection. The server
    // had not begun to answer, so at worst an engine computes a request twice; the callers
    // retry engine requests anyway.
    if (!answered && !this.retried && socket !== null && socket.served > 0) {
      this.retried = true;
      try {
        const fresh = this.connections.open(socket.origin);
        this.socket = fresh;
        fresh.send(
          requestText(this.method, this.url, fresh.origin, this.bodyJson, this.bodyLength, this.headers),
          this,
        );
        return;
      } catch (retryError) {
        this.fail(retryError);
        return;
      }
    }
    this.fail(error);
  }

  /** The sweep: the time limit has passed. */
  expire(): void {
    this.expired = true;
    this.fail(new Error("timed out"));
  }

  parentAborted(): void {
    this.fail(this.signal?.reason);
  }

  private bytes(): Buffer {
    if (this.parts !== null) return Buffer.concat(this.parts);
    return this.first === null ? Buffer.alloc(0) : this.first.subarray(this.firstStart, this.firstEnd);
  }

  private text(): string {
    if (this.parts !== null) return Buffer.concat(this.parts).toString("utf8");
    return this.first === null ? "" : this.first.toString("utf8", this.firstStart, this.firstEnd);
  }

  private succeed(value: unknown): void {
    this.settle();
    this.resolve(value);
  }

  private fail(error: unknown): void {
    if (this.settled) return;
    this.settle();
    // Unread, the connection is out of step: it is closed.
    const socket = this.socket;
    this.socket = null;
    socket?.destroy();
    const signal = this.signal;
    if (signal?.aborted) this.reject(signal.reason);
    else if (this.expired)
      this.reject(new EngineError(`request timed out after ${this.timeoutMs / 1000} s`, null));
    else if (error instanceof EngineError) this.reject(error);
    else this.reject(new EngineError(`connection error (${describeCause(error)})`, null));
  }

  private settle(): void {
    this.settled = true;
    unwatch(this);
    if (this.signal !== undefined) leaveParent(this.signal, this);
  }
}

function exchange(
  method: "GET" | "POST",
  url: string,
  body: unknown,
  options: RequestOptions,
  onEvent?: (event: unknown) => void,
): Promise<unknown> {
  const request = new Exchange(options.connections ?? shared(), options, onEvent);
  request.start(method, url, body, options.headers);
  return request.promise;
}

/** One SSE line: `data: {json}` goes to `onEvent`; `data: [DONE]`, comments and blank lines do not. */
function readEvent(line: string, onEvent: (event: unknown) => void): void {
  const trimmed = line.trim();
  if (!trimmed.startsWith("data:")) return;
  const data = trimmed.slice(5).trim();
  if (data === "" || data === "[DONE]") return;
  let event: unknown;
  try {
    event = JSON.parse(data);
  } catch {
    throw new EngineError(`a streamed event is not JSON (${data.slice(0, 100)})`, 502);
  }
  onEvent(event);
}

/** JSON.parse of an answer's text: null for an empty one, undefined for one that is not JSON. */
export function parseBody(text: string): unknown {
  try {
    return text === "" ? null : JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** The EngineError of a non-2xx answer. */
function statusError(status: number, retryAfter: string | null, text: string): EngineError {
  const fallback = text.trim() === "" ? "(no body)" : text.trim().slice(0, 300);
  return new EngineError(
    `HTTP ${status}: ${errorMessage(parseBody(text), fallback)}`,
    status,
    parseRetryAfter(retryAfter),
  );
}

/**
 * Sends one request and returns the parsed JSON body of a 2xx answer. Throws EngineError for
 * anything else; rethrows the caller's abort reason unchanged when `signal` aborts.
 */
export function requestJson(
  method: "GET" | "POST",
  url: string,
  body: unknown,
  options: RequestOptions,
): Promise<unknown> {
  return exchange(method, url, body, options);
}

/**
 * POSTs a streaming request and hands each event to `onEvent` as it arrives. Throws as
 * requestJson does; what `onEvent` has seen before an abort stays seen.
 */
export async function requestEvents(
  url: string,
  body: unknown,
  options: RequestOptions,
  onEvent: (event: unknown) => void,
): Promise<void> {
  await exchange("POST", url, body, options, onEvent);
}
