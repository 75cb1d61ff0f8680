// Large uploads are checked off the event loop (issue 19.5): in a worker thread with a bounded
// heap, so a 30 MB line never freezes the server and a line built to blow up the parser is
// refused at that heap's cost.
import { afterEach, describe, expect, it } from "vitest";
import { EMPTY_FILE_LINES } from "../../bench/episode-lines.ts";
import { DEFAULT_FILE_LIMITS, UploadStore } from "../../src/server/web/files.ts";

const { header, summary } = EMPTY_FILE_LINES;

const parse = JSON.parse;
afterEach(() => {
  JSON.parse = parse;
});

describe("large uploads", () => {
  it("are parsed in a worker thread, not on the event loop", async () => {
    const padding = "x".repeat(4 << 20);
    const padded = JSON.stringify({ ...JSON.parse(header), settings: { padding } });
    const text = `${padded}\n${summary}\n`;
    // On this thread, parsing anything large fails: the check must happen elsewhere.
    JSON.parse = ((source: string, reviver?: never) => {
      if (source.length > 1 << 20) throw new Error("parsed on the event loop");
      return parse(source, reviver);
    }) as typeof JSON.parse;
    const store = new UploadStore(DEFAULT_FILE_LIMITS);
    expect(await store.add(text)).toMatchObject({ episodes: 0, bytes: Buffer.byteLength(text) });
  });

  it("refuses a line of nested arrays built to blow up the parser, and names the line of a bad one", async () => {
    const store = new UploadStore(DEFAULT_FILE_LIMITS);
    const nested = `${header}\n${"[".repeat(15_000_000)}${"]".repeat(15_000_000)}\n${summary}\n`;
    await expect(store.add(nested)).rejects.toMatchObject({
      code: "bad_request",
      message: "line 2: nested deeper than 64 levels",
    });
    const bad = `${header}\n{"type": "group", "padding": "${"y".repeat(1 << 20)}"\n${summary}\n`;
    await expect(store.add(bad)).rejects.toMatchObject({
      code: "bad_request",
      message: "line 2: not a JSON line",
    });
  });
});
