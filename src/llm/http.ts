// JSON over HTTP for inference engines. The `openai` SDK drops the message of vLLM's older
// flat error body ({"object":"error","message":…}: it reads only body.error), and token mode
// needs routes it does not cover (/tokenize, llama.cpp's /completion), so engine requests go
// through this small wrapper instead. It sends with undici's Client on keep-alive connections
// of its own rather than with fetch, which costs about four times the CPU per request and, with
// thousands of requests in flight, scans every open connection to dispatch one (README).
import { Client } from "undici";
import { RollgymError } from "../errors/catalogue.ts";
import { deadline, type PauseClock } from "./deadline.ts";

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
  // Not a parameter property: Node's type stripping refuses them (erasableSyntaxOnly).
  constructor(text: string) {
    this.text = text;
  }
}

/** The JSON text of a request body. */
function bodyText(body: unknown): string {
  return body instanceof JsonText ? body.text : JSON.stringify(body);
}

export interface RequestOptions {
  signal?: AbortSignal;
  timeoutMs: number;
  headers?: Record<string, string>;
  /** The connections to send on (a policy's own); default: one set shared by all callers. */
  connections?: EngineConnections;
  /** Time paused on it (a weight update) does not count against timeoutMs. */
  clock?: PauseClock;
}

/** One keep-alive connection and the idle stack of its origin it returns to. */
interface Connection {
  readonly client: Client;
  readonly origin: string;
  readonly idle: Connection[];
}

/**
 * Keep-alive connections to engine replicas: one undici Client (one connection, no pipelining)
 * per request in flight, reused newest first, so idle ones time out and busy ones stay warm.
 * undici's Pool (and Node's fetch, built on it) looks for a free connection by scanning all of
 * them on every dispatch, which at 10,000 connections costs more than the request itself; here
 * taking and returning one is O(1). The replica pool's in-flight cap bounds their number.
 * Our own deadline times requests, so undici's header and body timeouts are off (a long
 * generation may take minutes to its first byte).
 */
export class EngineConnections {
  private readonly idle = new Map<string, Connection[]>();
  private readonly all = new Set<Client>();
  private closed = false;

  /** A free connection to the origin `url` starts with. */
  take(url: string): Connection {
    if (this.closed) throw new Error("the engine connections are closed");
    const origin = originOf(url);
    let idle = this.idle.get(origin);
    if (idle === undefined) {
      idle = [];
      this.idle.set(origin, idle);
    }
    const reused = idle.pop();
    if (reused !== undefined) return reused;
    const client = new Client(origin, { pipelining: 1, headersTimeout: 0, bodyTimeout: 0 });
    this.all.add(client);
    return { client, origin, idle };
  }

  /** Gives a connection back once its answer has been read (or its request failed). */
  give(connection: Connection): void {
    if (this.closed || connection.client.destroyed || connection.client.closed) {
      this.all.delete(connection.client);
      if (!connection.client.destroyed) void connection.client.destroy().catch(() => {});
      return;
    }
    connection.idle.push(connection);
  }

  /** Connections open or opened, for tests and metrics. */
  get size(): number {
    return this.all.size;
  }

  /** Closes every connection; requests still running on one fail. */
  async close(): Promise<void> {
    this.closed = true;
    this.idle.clear();
    const clients = [...this.all];
    this.all.clear();
    await Promise.all(clients.map((client) => client.destroy().catch(() => {})));
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

/** What came back: the status, Retry-After, and the body (empty when it was read as events). */
interface Exchanged {
  status: number;
  retryAfter: string | null;
  text: string;
}

/**
 * Sends one request and reads the answer: whole, or (with `onEvent`, for a 2xx) as server-sent
 * events, each `data:` line's JSON handed over as it arrives. Throws EngineError when no answer
 * comes; rethrows the caller's abort reason unchanged when `signal` aborts, even mid-stream.
 */
async function exchange(
  method: "GET" | "POST",
  url: string,
  body: unknown,
  options: RequestOptions,
  onEvent?: (event: unknown) => void,
): Promise<Exchanged> {
  const limit = deadline(options.timeoutMs, options.signal, options.clock);
  const connections = options.connections ?? shared();
  let connection: Connection | null = null;
  // A stream left unread (an abort, a bad event) leaves the connection unusable: it is closed.
  let unread = false;
  try {
    connection = connections.take(url);
    const response = await connection.client.request({
      path: url.slice(connection.origin.length) || "/",
      method,
      headers:
        body === undefined ? options.headers : { "content-type": "application/json", ...options.headers },
      body: body === undefined ? undefined : bodyText(body),
      signal: limit.signal,
    });
    const status = response.statusCode;
    const header = response.headers["retry-after"];
    const retryAfter = (Array.isArray(header) ? header[0] : header) ?? null;
    if (onEvent === undefined || status < 200 || status > 299)
      return { status, retryAfter, text: await response.body.text() };
    let pending = "";
    unread = true;
    for await (const chunk of response.body) {
      const lines = (pending + (chunk as Buffer).toString("utf8")).split("\n");
      pending = lines.pop() ?? "";
      for (const line of lines) readEvent(line, onEvent);
    }
    unread = false;
    readEvent(pending, onEvent);
    return { status, retryAfter, text: "" };
  } catch (error) {
    if (options.signal?.aborted) throw options.signal.reason;
    if (limit.expired) throw new EngineError(`request timed out after ${options.timeoutMs / 1000} s`, null);
    if (error instanceof EngineError) throw error;
    throw new EngineError(`connection error (${describeCause(error)})`, null);
  } finally {
    limit.dispose();
    if (connection !== null) {
      if (unread) void connection.client.destroy().catch(() => {});
      connections.give(connection);
    }
  }
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

function parseBody(text: string): unknown {
  try {
    return text === "" ? null : JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** The EngineError of a non-2xx answer. */
function statusError({ status, retryAfter, text }: Exchanged): EngineError {
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
export async function requestJson(
  method: "GET" | "POST",
  url: string,
  body: unknown,
  options: RequestOptions,
): Promise<unknown> {
  const answer = await exchange(method, url, body, options);
  if (answer.status < 200 || answer.status > 299) throw statusError(answer);
  const parsed = parseBody(answer.text);
  if (parsed === undefined)
    throw new EngineError(`HTTP ${answer.status}: the body is not JSON (${answer.text.slice(0, 100)})`, 502);
  return parsed;
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
  const answer = await exchange("POST", url, body, options, onEvent);
  if (answer.status < 200 || answer.status > 299) throw statusError(answer);
}
