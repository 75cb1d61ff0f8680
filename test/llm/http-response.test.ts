// The HTTP/1.1 response parser on bytes alone: bodies by length, chunked (extensions,
// trailers) and until close, split at every byte boundary; malformed heads and chunk lines.
import { describe, expect, it } from "vitest";
import { ResponseError, ResponseParser, type ResponseSink } from "../../src/llm/http-response.ts";

/** What a parser reported, with the body bytes joined. */
class Recorder implements ResponseSink {
  heads: Array<[number, string | null]> = [];
  parts: Buffer[] = [];
  finished: boolean[] = [];
  head(status: number, retryAfter: string | null): void {
    this.heads.push([status, retryAfter]);
  }
  body(chunk: Buffer, start: number, end: number): void {
    this.parts.push(Buffer.from(chunk.subarray(start, end)));
  }
  done(reusable: boolean): void {
    this.finished.push(reusable);
  }
  get text(): string {
    return Buffer.concat(this.parts).toString("utf8");
  }
}

function parse(pieces: Buffer[], close = false): Recorder {
  const recorder = new Recorder();
  const parser = new ResponseParser(recorder);
  parser.reset();
  for (const piece of pieces) parser.push(piece);
  if (close) parser.end();
  return recorder;
}

/** The bytes split in two at every boundary, then one byte at a time. */
function splits(bytes: Buffer): Buffer[][] {
  const ways: Buffer[][] = [];
  for (let at = 1; at < bytes.length; at++) ways.push([bytes.subarray(0, at), bytes.subarray(at)]);
  ways.push(Array.from(bytes, (byte) => Buffer.from([byte])));
  return ways;
}

const chunked = Buffer.from(
  "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nRetry-After: 3\r\n\r\n" +
    "5;name=value\r\nhello\r\n" +
    "8\r\n, wörld\r\n" +
    "A\r\n0123456789\r\n" +
    "0\r\nX-Trailer: yes\r\nX-Other: 1\r\n\r\n",
);

describe("ResponseParser", () => {
  it("reads a chunked body with extensions and trailers split at every byte boundary", () => {
    for (const pieces of splits(chunked)) {
      const seen = parse(pieces);
      expect(seen.heads).toEqual([[200, "3"]]);
      expect(seen.text).toBe("hello, wörld0123456789");
      expect(seen.finished).toEqual([true]);
    }
  });

  it("reads a body by Content-Length split at every byte boundary, and a body until close", () => {
    const body = '{"text":"ünïcödé ✓ 🚀"}';
    const bytes = Buffer.from(
      `HTTP/1.1 503 Service Unavailable\r\ncontent-length: ${Buffer.byteLength(body)}\r\nretry-after: 7\r\n\r\n${body}`,
    );
    for (const pieces of splits(bytes)) {
      const seen = parse(pieces);
      expect(seen.heads).toEqual([[503, "7"]]);
      expect(seen.text).toBe(body);
      expect(seen.finished).toEqual([true]);
    }
    const untilClose = parse([Buffer.from("HTTP/1.1 200 OK\r\n\r\nall"), Buffer.from(" of it")], true);
    expect(untilClose.text).toBe("all of it");
    expect(untilClose.finished).toEqual([false]);
  });

  it("skips interim 1xx answers and says when the connection may not be reused", () => {
    const interim = parse([
      Buffer.from("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
    ]);
    expect(interim.heads).toEqual([[200, null]]);
    expect(interim.finished).toEqual([true]);
    const close = parse([Buffer.from("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")]);
    expect(close.finished).toEqual([false]);
    const old = parse([Buffer.from("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")]);
    expect(old.finished).toEqual([false]);
    const oldKept = parse([
      Buffer.from("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n"),
    ]);
    expect(oldKept.finished).toEqual([true]);
    const extra = parse([Buffer.from("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA")]);
    expect(extra.text).toBe("ok");
    expect(extra.finished).toEqual([false]);
    const empty = parse([Buffer.from("HTTP/1.1 204 No Content\r\n\r\n")]);
    expect(empty.finished).toEqual([true]);
  });

  it("names what is malformed", () => {
    const cases: Array<[string, RegExp]> = [
      ["HTTP/1.1 2x0 OK\r\n\r\n", /^malformed status line "HTTP\/1.1 2x0 OK"/],
      ["SPDY/3 200 OK\r\n\r\n", /^malformed status line/],
      ["HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", /^malformed header line "no colon here"/],
      ["HTTP/1.1 200 OK\r\n folded: value\r\n\r\n", /^malformed header line/],
      ["HTTP/1.1 200 OK\r\nContent-Length: 12x\r\n\r\n", /^malformed content-length "12x"/],
      ["HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", /^malformed content-length/],
      ["HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", /^malformed chunk size "zz"/],
      [
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokX\r\n",
        /^a chunk does not end with CRLF/,
      ],
      ["HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\nok", /without CRLF/],
    ];
    for (const [bytes, message] of cases) {
      expect(() => parse([Buffer.from(bytes)]), bytes).toThrow(message);
      expect(() => parse([Buffer.from(bytes)])).toThrow(ResponseError);
    }
    expect(() => parse([Buffer.from(`HTTP/1.1 200 OK\r\nX: ${"y".repeat(70_000)}`)])).toThrow(
      /head is too long/,
    );
  });

  it("says when the connection closes before an answer or in the middle of a body", () => {
    expect(() => parse([], true)).toThrow("the connection closed before a response");
    expect(() => parse([Buffer.from("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")], true)).toThrow(
      "the connection closed before the end of the response body",
    );
    expect(() =>
      parse([Buffer.from("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab")], true),
    ).toThrow("the connection closed before the end of the response body");
  });
});
