// The decoded-size bound of client frames (issue 19.7, docs/server.md "Memory bounds, from the
// limits"): a frame whose bytes would decode to more than MAX_CLIENT_DECODED_BYTES of heap is
// refused before it is decoded, while the protocol's largest legitimate frames pass.
import { describe, expect, it } from "vitest";
import {
  decodeFrame,
  encodeMessage,
  FrameDecodeError,
  MAX_CLIENT_DECODED_BYTES,
} from "../../protocol/codec.ts";
import { DECODED_COST, decodedSize } from "../../protocol/decoded-size.ts";

const size = (value: unknown) =>
  decodedSize(encodeMessage(value as object), Number.POSITIVE_INFINITY, 256, 64);

describe("decodedSize", () => {
  it("charges each kind of item as documented", () => {
    const { slot, map, key, newShape, array, float, string, bin } = DECODED_COST;
    expect(size([])).toBe(array);
    expect(size([1, null, true, -1])).toBe(array + 4 * slot);
    expect(size([1.5])).toBe(array + slot + float);
    expect(size(["abc"])).toBe(array + slot + string + 2 * 3);
    expect(size([new Uint8Array(10)])).toBe(array + slot + bin);
    expect(size({})).toBe(map);
    // The key "a" (2 bytes with its header) is a new shape; the same keys again cost only their storage.
    expect(size({ a: 1 })).toBe(map + key + newShape + 2 * 2);
    expect(size([{ a: 1 }, { a: 2 }])).toBe(array + 2 * slot + 2 * map + 2 * key + newShape + 2 * 2);
    // Keys in another order are other shapes.
    expect(
      size([
        { a: 1, b: 1 },
        { b: 1, a: 1 },
      ]),
    ).toBe(array + 2 * slot + 2 * map + 4 * key + 4 * (newShape + 4));
  });

  it("stops counting past the limit, and calls nesting deeper than the bound infinite", () => {
    const bytes = encodeMessage({ xs: Array.from({ length: 100_000 }, () => ({})) });
    const all = decodedSize(bytes, Number.POSITIVE_INFINITY, 256, 64);
    // The array's header alone (its 100,000 slots) passes the limit: no map is counted.
    expect(decodedSize(bytes, 1000, 256, 64)).toBe(
      DECODED_COST.map +
        DECODED_COST.key +
        DECODED_COST.newShape +
        2 * 3 +
        DECODED_COST.array +
        100_000 * DECODED_COST.slot,
    );
    expect(all).toBe(decodedSize(bytes, 1000, 256, 64) + 100_000 * DECODED_COST.map);
    expect(decodedSize(new Uint8Array(100).fill(0x91), 1 << 20, 256, 64)).toBe(Number.POSITIVE_INFINITY);
  });
});

describe("client frames", () => {
  it("refuse a megabyte of empty maps before decoding it", () => {
    const costly = encodeMessage({
      type: "credit",
      groups: 1,
      xs: Array.from({ length: 1_000_000 }, () => ({})),
    });
    expect(() => decodeFrame(costly, "client")).toThrow(
      new RegExp(`would decode to more than ${MAX_CLIENT_DECODED_BYTES} bytes`),
    );
    // Other peers' frames (the server's own replies, read by clients) are not bounded this way.
    expect(() => decodeFrame(costly)).not.toThrow();
  });

  it("refuse what the decoder alone would only find out after allocating", () => {
    // A 5-byte array header announcing 2^32 − 1 elements: refused for its size, not its truncation.
    expect(() => decodeFrame(new Uint8Array([0xdd, 0xff, 0xff, 0xff, 0xff]), "client")).toThrow(
      /would decode to more than/,
    );
    // 100 levels of one-item arrays, truncated: refused for the nesting before any is built.
    expect(() => decodeFrame(new Uint8Array(100).fill(0x91), "client")).toThrow(/nesting deeper than 64/);
    expect(() => decodeFrame(new Uint8Array(100).fill(0x91))).toThrow(FrameDecodeError);
  });

  it("let the protocol's largest frames through", () => {
    const responses = Array.from({ length: 16_384 }, (_, i) => ({ env_id: i, text: "<answer>Up</answer>" }));
    const step = { type: "env_step", id: "e", responses };
    expect(decodeFrame(encodeMessage(step), "client")).toEqual(step);
    const ids = Array.from({ length: 1_000_000 }, (_, i) => i % 128);
    const tokens = { type: "env_step", id: "e", responses: [{ env_id: 0, text: "", sampled_ids: ids }] };
    expect(decodeFrame(encodeMessage(tokens), "client")).toEqual(tokens);
    const text = { type: "env_step", id: "e", responses: [{ env_id: 0, text: "é".repeat(500_000) }] };
    expect(decodeFrame(encodeMessage(text), "client")).toEqual(text);
  });
});
