// Reads HTTP/1.1 responses from the bytes of one connection: the status line and the headers an
// engine client needs, then the body by Content-Length, chunked coding (extensions and trailers
// read and dropped) or until the connection closes. It never touches the network, so tests can
// feed it bytes split anywhere. Malformed input throws a ResponseError naming what was wrong.

/** Where a parsed response goes. */
export interface ResponseSink {
  /** The status and Retry-After (the headers an engine client reads) of the final answer. */
  head(status: number, retryAfter: string | null): void;
  /** Body bytes `chunk[start, end)`; the parser never writes into `chunk`, so it may be kept. */
  body(chunk: Buffer, start: number, end: number): void;
  /** The response is complete; `reusable`: the connection may carry another request. */
  done(reusable: boolean): void;
}

/** Bytes that are not a well-formed HTTP/1.1 response. */
export class ResponseError extends Error {
  override name = "ResponseError";
}

/** A response head (status line and headers) may not be longer than this. */
export const MAX_HEAD_BYTES = 64 * 1024;
/** Nor a chunk-size line or a trailer line. */
const MAX_LINE_BYTES = 8 * 1024;

/** Where the parser is in a response. */
const Phase = {
  Head: 0,
  Length: 1,
  ChunkSize: 2,
  ChunkData: 3,
  /** The CRLF after a chunk's data. */
  ChunkEnd: 4,
  Trailers: 5,
  UntilClose: 6,
  Done: 7,
} as const;
type Phase = (typeof Phase)[keyof typeof Phase];

const HEAD_END = Buffer.from("\r\n\r\n");
const CR = 13;
const LF = 10;

export class ResponseParser {
  private phase: Phase = Phase.Done;
  /** Bytes of a head or line not complete yet. */
  private pending: Buffer | null = null;
  private remaining = 0;
  private keepAlive = true;

  private readonly sink: ResponseSink;

  constructor(sink: ResponseSink) {
    this.sink = sink;
  }

  /** Expects a new response (its request has been sent). */
  reset(): void {
    this.phase = Phase.Head;
    this.pending = null;
    this.keepAlive = true;
  }

  /** True while a response is expected or being read. */
  get reading(): boolean {
    return this.phase !== Phase.Done;
  }

  /** Reads the next bytes of the connection; throws ResponseError on malformed input. */
  push(input: Buffer): void {
    if (this.phase === Phase.Done) throw new ResponseError("the server sent data with no request pending");
    let data = input;
    if (this.pending !== null) {
      data = Buffer.concat([this.pending, input]);
      this.pending = null;
    }
    let at = 0;
    const size = data.length;
    while (at < size && this.phase !== Phase.Done) {
      switch (this.phase) {
        case Phase.Head: {
          const end = data.indexOf(HEAD_END, at);
          if (end === -1) {
            if (size - at > MAX_HEAD_BYTES) throw new ResponseError("the response head is too long");
            this.pending = data.subarray(at);
            return;
          }
          this.readHead(data.toString("latin1", at, end));
          at = end + 4;
          break;
        }
        case Phase.Length:
        case Phase.ChunkData: {
          const end = Math.min(size, at + this.remaining);
          this.sink.body(data, at, end);
          this.remaining -= end - at;
          at = end;
          if (this.remaining === 0) {
            if (this.phase === Phase.Length) this.phase = Phase.Done;
            else this.phase = Phase.ChunkEnd;
          }
          break;
        }
        case Phase.UntilClose:
          this.sink.body(data, at, size);
          at = size;
          break;
        default: {
          const end = lineEnd(data, at);
          if (end === -1) {
            if (size - at > MAX_LINE_BYTES)
              throw new ResponseError("a chunk-size or trailer line is too long");
            this.pending = data.subarray(at);
            return;
          }
          this.readLine(data, at, end);
          at = end + 2;
        }
      }
    }
    if (this.phase === Phase.Done) this.sink.done(this.keepAlive && at === size);
  }

  /** The connection ended: completes a body read until close; throws if a response was cut short. */
  end(): void {
    if (this.phase === Phase.UntilClose) {
      this.phase = Phase.Done;
      this.sink.done(false);
      return;
    }
    if (this.phase === Phase.Done) return;
    throw new ResponseError(
      this.phase === Phase.Head
        ? "the connection closed before a response"
        : "the connection closed before the end of the response body",
    );
  }

  /** The status line and headers (`head` without its final CRLF CRLF). */
  private readHead(head: string): void {
    let lineEnd = head.indexOf("\r\n");
    if (lineEnd === -1) lineEnd = head.length;
    const statusLine = head.slice(0, lineEnd);
    const status = statusOf(statusLine);
    if (status === -1)
      throw new ResponseError(`malformed status line ${JSON.stringify(statusLine.slice(0, 100))}`);
    // HTTP/1.0 closes after each answer unless it says otherwise.
    this.keepAlive = statusLine.charCodeAt(7) === 49;
    let retryAfter: string | null = null;
    let length = -1;
    let chunked = false;
    let coded = false;
    for (let at = lineEnd + 2; at < head.length; ) {
      let end = head.indexOf("\r\n", at);
      if (end === -1) end = head.length;
      const colon = head.indexOf(":", at);
      const first = head.charCodeAt(at);
      // A name is non-empty and has no whitespace (a line starting with one would be obs-fold).
      if (
        colon === -1 ||
        colon >= end ||
        colon === at ||
        first === 32 ||
        first === 9 ||
        hasSpace(head, at, colon)
      )
        throw new ResponseError(
          `malformed header line ${JSON.stringify(head.slice(at, Math.min(end, at + 100)))}`,
        );
      const nameLength = colon - at;
      // Only names of the lengths that matter are lowered and compared.
      if (nameLength === 10 || nameLength === 11 || nameLength === 14 || nameLength === 17) {
        const name = head.slice(at, colon).toLowerCase();
        const value = head.slice(colon + 1, end).trim();
        if (name === "content-length") {
          const parsed = /^\d{1,15}$/.test(value) ? Number(value) : -1;
          if (parsed === -1 || (length !== -1 && parsed !== length))
            throw new ResponseError(`malformed content-length ${JSON.stringify(value.slice(0, 40))}`);
          length = parsed;
        } else if (name === "transfer-encoding") {
          coded = true;
          const codings = value.toLowerCase().split(",");
          chunked = codings[codings.length - 1].trim() === "chunked";
        } else if (name === "connection") {
          const tokens = value.toLowerCase();
          if (tokens === "keep-alive") this.keepAlive = true;
          else if (tokens === "close" || /(^|,)\s*close\s*(,|$)/.test(tokens)) this.keepAlive = false;
          else if (/(^|,)\s*keep-alive\s*(,|$)/.test(tokens)) this.keepAlive = true;
        } else if (name === "retry-after" && retryAfter === null) retryAfter = value;
      }
      at = end + 2;
    }
    // 1xx answers are interim: the real one follows.
    if (status < 200) return;
    this.sink.head(status, retryAfter);
    if (status === 204 || status === 304) this.phase = Phase.Done;
    else if (chunked) this.phase = Phase.ChunkSize;
    else if (coded) {
      this.phase = Phase.UntilClose;
      this.keepAlive = false;
    } else if (length !== -1) {
      this.remaining = length;
      this.phase = length === 0 ? Phase.Done : Phase.Length;
    } else {
      this.phase = Phase.UntilClose;
      this.keepAlive = false;
    }
  }

  /** A chunk-size line, the CRLF after a chunk's data, or a trailer line: `data[start, end)`. */
  private readLine(data: Buffer, start: number, end: number): void {
    if (this.phase === Phase.ChunkEnd) {
      if (end !== start) throw new ResponseError("a chunk does not end with CRLF");
      this.phase = Phase.ChunkSize;
      return;
    }
    if (this.phase === Phase.Trailers) {
      if (end === start) this.phase = Phase.Done;
      return;
    }
    let size = 0;
    let at = start;
    for (; at < end; at++) {
      const digit = hexValue(data[at]);
      if (digit === -1) break;
      size = size * 16 + digit;
    }
    // Extensions (";name=value") are allowed after the size and ignored.
    const next = data[at];
    if (at === start || at - start > 12 || (at < end && next !== 59 && next !== 32 && next !== 9))
      throw new ResponseError(
        `malformed chunk size ${JSON.stringify(data.toString("latin1", start, Math.min(end, start + 40)))}`,
      );
    if (size === 0) this.phase = Phase.Trailers;
    else {
      this.remaining = size;
      this.phase = Phase.ChunkData;
    }
  }
}

/** The status of "HTTP/1.x NNN reason", or -1. */
function statusOf(line: string): number {
  if (line.length < 12 || !line.startsWith("HTTP/1.") || line.charCodeAt(8) !== 32) return -1;
  const minor = line.charCodeAt(7);
  if (minor !== 48 && minor !== 49) return -1;
  let status = 0;
  for (let i = 9; i < 12; i++) {
    const digit = line.charCodeAt(i) - 48;
    if (digit < 0 || digit > 9) return -1;
    status = status * 10 + digit;
  }
  if (status < 100 || (line.length > 12 && line.charCodeAt(12) !== 32)) return -1;
  return status;
}

function hasSpace(text: string, start: number, end: number): boolean {
  for (let i = start; i < end; i++) {
    const c = text.charCodeAt(i);
    if (c === 32 || c === 9) return true;
  }
  return false;
}

/** The index of the CRLF ending the line that starts at `start`, or -1 when it has not come yet. */
function lineEnd(data: Buffer, start: number): number {
  const at = data.indexOf(LF, start);
  if (at === -1) return -1;
  if (at > start && data[at - 1] === CR) return at - 1;
  throw new ResponseError("a line of the chunked body ends without CRLF");
}

function hexValue(byte: number): number {
  if (byte >= 48 && byte <= 57) return byte - 48;
  if (byte >= 97 && byte <= 102) return byte - 87;
  if (byte >= 65 && byte <= 70) return byte - 55;
  return -1;
}
