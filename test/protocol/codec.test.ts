import { readFileSync } from "node:fs";
import { join } from "node:path";
// Wire codec: msgpack framing, decode hardening, little-endian typed-array helpers, code tables.
import { encode } from "@msgpack/msgpack";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  CLIENT_MESSAGE_SCHEMAS,
  CLOSE_CODES,
  decodeFrame,
  ERROR_CODES,
  ErrorFrameSchema,
  encodeMessage,
  FrameDecodeError,
  f32Bin,
  f32BinOf,
  i32Bin,
  i32BinOf,
  MAX_FRAME_DEPTH,
  readF32,
  readI32,
  readU8,
  SERVER_MESSAGE_SCHEMAS,
  u8Bin,
  u8BinOf,
} from "../../protocol/index.ts";
import { ROOT } from "../helpers/cli.ts";
import { anyValue, arbitraryFor } from "./arbitrary.ts";

function roundTrip(value: object): unknown {
  return decodeFrame(encodeMessage(value));
}

/** `bytes` copied to offset 1 of a fresh buffer, so typed-array views on it are misaligned. */
function misaligned(bytes: Uint8Array): Uint8Array {
  const out = new Uint8Array(bytes.byteLength + 1).subarray(1);
  out.set(bytes);
  return out;
}

function expectDecodeError(data: Uint8Array): void {
  expect(() => decodeFrame(data)).toThrow(FrameDecodeError);
}

describe("encodeMessage / decodeFrame", () => {
  const schemas = { ...CLIENT_MESSAGE_SCHEMAS, ...SERVER_MESSAGE_SCHEMAS };
  for (const [type, schema] of Object.entries(schemas)) {
    it(`round-trips arbitrary valid ${type} messages`, () => {
      const fromClient = type in CLIENT_MESSAGE_SCHEMAS;
      fc.assert(
        fc.property(arbitraryFor(schema), (message) => {
          expect(roundTrip(message as object)).toEqual(message);
          // Within the client decoder's bounds too (map keys, decoded size).
          if (fromClient) expect(decodeFrame(encodeMessage(message as object), "client")).toEqual(message);
        }),
        { numRuns: 150 },
      );
    });
  }

  it("round-trips arbitrary maps of msgpack values", () => {
    fc.assert(
      fc.property(
        fc.dictionary(
          fc.string().filter((k) => k !== "__proto__"),
          anyValue,
        ),
        (value) => {
          expect(roundTrip(value)).toEqual(value);
        },
      ),
    );
  });

  it("encodes Uint8Array as bin and omits undefined fields", () => {
    const data = encodeMessage({ type: "x", a: new Uint8Array([1, 2]), b: undefined });
    expect(Array.from(data)).toEqual(Array.from(encode({ type: "x", a: new Uint8Array([1, 2]) })));
    const decoded = decodeFrame(data) as Record<string, unknown>;
    expect(decoded["a"]).toBeInstanceOf(Uint8Array);
    expect("b" in decoded).toBe(false);
  });

  it("returns non-map values as they are (validateClientMessage rejects them)", () => {
    expect(decodeFrame(encode(1))).toBe(1);
    expect(decodeFrame(encode([1, "a"]))).toEqual([1, "a"]);
    expect(decodeFrame(encode({ 1: "a" }))).toEqual({ 1: "a" });
  });

  it("rejects empty input, reserved bytes and garbage", () => {
    expectDecodeError(new Uint8Array(0));
    expectDecodeError(new Uint8Array([0xc1])); // never used in msgpack
    expectDecodeError(new TextEncoder().encode('{"type":"hello"}'));
  });

  it("rejects every truncation of a valid frame", () => {
    const frame = encodeMessage({
      type: "rollout",
      id: "r1",
      tags: [{ tag: "SimpleSokoban", groups: 8 }],
      mode: "train",
      group_size: 16,
      delivery: "stream",
      sampling: { temperature: 0.7 },
      blob: new Uint8Array(10),
    });
    for (let n = 0; n < frame.length; n++) expectDecodeError(frame.subarray(0, n));
  });

  it("rejects trailing bytes", () => {
    const frame = encodeMessage({ type: "credit", groups: 1 });
    const extended = new Uint8Array(frame.length + 1);
    extended.set(frame);
    expectDecodeError(extended);
    const two = new Uint8Array(frame.length * 2);
    two.set(frame);
    two.set(frame, frame.length);
    expectDecodeError(two);
  });

  it("rejects __proto__ keys", () => {
    // fixmap(1) { "__proto__": 1 }
    const key = new TextEncoder().encode("__proto__");
    expectDecodeError(new Uint8Array([0x81, 0xa0 | key.length, ...key, 0x01]));
  });

  it(`accepts nesting up to ${MAX_FRAME_DEPTH} levels and rejects deeper frames without overflowing`, () => {
    const nested = (depth: number): Uint8Array => {
      const bytes = new Uint8Array(depth + 1).fill(0x91); // fixarray(1), depth times
      bytes[depth] = 0xc0; // nil
      return bytes;
    };
    expect(() => decodeFrame(nested(MAX_FRAME_DEPTH))).not.toThrow();
    expectDecodeError(nested(MAX_FRAME_DEPTH + 1));
    expectDecodeError(nested(1_000_000));
    // Maps count too: fixmap(1) {"k": ...}.
    const mapLevel = [0x81, 0xa1, 0x6b];
    const deepMaps = new Uint8Array([
      ...Array(MAX_FRAME_DEPTH + 1)
        .fill(mapLevel)
        .flat(),
      0xc0,
    ]);
    expectDecodeError(deepMaps);
  });

  it("either decodes or throws FrameDecodeError on arbitrary bytes", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), fc.constantFrom("any", "client"), (bytes, from) => {
        try {
          decodeFrame(bytes, from as "any" | "client");
        } catch (err) {
          expect(err).toBeInstanceOf(FrameDecodeError);
        }
      }),
      { numRuns: 2000 },
    );
  });
});

describe("typed-array helpers", () => {
  const int32 = fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 });

  it("i32Bin writes little-endian bytes", () => {
    expect(Array.from(i32Bin([1, -2, 0x01020304]))).toEqual([1, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff, 4, 3, 2, 1]);
  });

  it("f32Bin writes little-endian IEEE-754 bytes", () => {
    expect(Array.from(f32Bin([1, -0, Number.POSITIVE_INFINITY]))).toEqual([
      0, 0, 0x80, 0x3f, 0, 0, 0, 0x80, 0, 0, 0x80, 0x7f,
    ]);
  });

  it("u8Bin maps booleans to 0/1", () => {
    expect(Array.from(u8Bin([true, false, 7, 255]))).toEqual([1, 0, 7, 255]);
  });

  it("the *BinOf helpers write the bytes of their parts concatenated", () => {
    const parts = fc.array(fc.array(int32, { maxLength: 20 }), { maxLength: 6 });
    fc.assert(
      fc.property(parts, (lists) => {
        expect(i32BinOf(lists)).toEqual(i32Bin(lists.flat()));
      }),
    );
    fc.assert(
      fc.property(fc.array(fc.array(fc.float(), { maxLength: 20 }), { maxLength: 6 }), (lists) => {
        expect(f32BinOf(lists)).toEqual(f32Bin(lists.flat()));
      }),
    );
    fc.assert(
      fc.property(
        fc.array(fc.array(fc.integer({ min: 0, max: 255 }), { maxLength: 20 }), { maxLength: 6 }),
        (lists) => {
          expect(u8BinOf(lists)).toEqual(u8Bin(lists.flat()));
        },
      ),
    );
  });

  it("the *BinOf helpers name a bad value by its index in the concatenation", () => {
    expect(() =>
      i32BinOf([
        [1, 2],
        [3, 2 ** 31],
      ]),
    ).toThrow("i32Bin: values[3] = 2147483648 is not an int32");
    expect(() => u8BinOf([[1], [], [2, 256]])).toThrow("u8Bin: values[2] = 256 is not a uint8");
  });

  it("round-trip int32 arrays through a frame", () => {
    fc.assert(
      fc.property(fc.array(int32, { maxLength: 300 }), (values) => {
        const decoded = roundTrip({ env_ids_i32: i32Bin(values) }) as { env_ids_i32: Uint8Array };
        expect(Array.from(readI32(decoded.env_ids_i32))).toEqual(values);
      }),
    );
  });

  it("round-trip uint8 arrays through a frame", () => {
    fc.assert(
      fc.property(fc.array(fc.oneof(fc.boolean(), fc.integer({ min: 0, max: 255 }))), (values) => {
        const decoded = roundTrip({ success_u8: u8Bin(values) }) as { success_u8: Uint8Array };
        expect(Array.from(readU8(decoded.success_u8))).toEqual(values.map(Number));
      }),
    );
  });

  it("round-trip float32 values (NaN, ±0, ±Infinity, subnormals) through a frame", () => {
    fc.assert(
      fc.property(fc.array(fc.float(), { maxLength: 300 }), (values) => {
        const decoded = roundTrip({ scores_f32: f32Bin(values) }) as { scores_f32: Uint8Array };
        const read = readF32(decoded.scores_f32);
        expect(read.length).toBe(values.length);
        for (let i = 0; i < values.length; i++) expect(Object.is(read[i], values[i])).toBe(true);
      }),
    );
    const special = readF32(f32Bin([Number.NaN, -0, Number.NEGATIVE_INFINITY, 1e-45]));
    expect(Number.isNaN(special[0])).toBe(true);
    expect(Object.is(special[1], -0)).toBe(true);
    expect(special[2]).toBe(Number.NEGATIVE_INFINITY);
    expect(special[3]).toBe(Math.fround(1e-45));
  });

  it("rounds doubles to float32", () => {
    fc.assert(
      fc.property(fc.double(), (v) => {
        expect(Object.is(readF32(f32Bin([v]))[0], Math.fround(v))).toBe(true);
      }),
    );
  });

  it("readF32 / readI32 keep the exact bits, aligned or not", () => {
    fc.assert(
      fc.property(
        fc.nat({ max: 40 }).chain((n) => fc.uint8Array({ minLength: n * 4, maxLength: n * 4 })),
        (bytes) => {
          for (const bin of [bytes, misaligned(bytes)]) {
            const f = readF32(bin);
            expect(Array.from(new Uint8Array(f.buffer, f.byteOffset, f.byteLength))).toEqual(
              Array.from(bytes),
            );
            const i = readI32(bin);
            expect(Array.from(new Uint8Array(i.buffer, i.byteOffset, i.byteLength))).toEqual(
              Array.from(bytes),
            );
          }
        },
      ),
    );
  });

  it("reads a misaligned Node Buffer (a decode of a Buffer yields Buffers, whose slice is a view)", () => {
    const pool = Buffer.alloc(64, 0xee);
    const bin = pool.subarray(3, 11);
    bin.writeInt32LE(-7, 0);
    bin.writeFloatLE(0.5, 4);
    expect([...readI32(bin)]).toEqual([-7, new DataView(bin.buffer, bin.byteOffset + 4).getInt32(0, true)]);
    expect(readF32(bin)[1]).toBe(0.5);
  });

  it("readI32 shares memory when aligned and copies when misaligned", () => {
    const aligned = i32Bin([5, 6]);
    expect(readI32(aligned).buffer).toBe(aligned.buffer);
    const off = misaligned(aligned);
    const copy = readI32(off);
    expect(copy.buffer).not.toBe(off.buffer);
    expect(Array.from(copy)).toEqual([5, 6]);
  });

  it("rejects values that do not fit the dtype", () => {
    for (const bad of [2 ** 31, -(2 ** 31) - 1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => i32Bin([bad])).toThrow(RangeError);
    }
    for (const bad of [256, -1, 0.5, Number.NaN]) expect(() => u8Bin([bad])).toThrow(RangeError);
  });

  it("rejects byte lengths that are not a multiple of the width", () => {
    expect(() => readI32(new Uint8Array(3))).toThrow(RangeError);
    expect(() => readF32(new Uint8Array(5))).toThrow(RangeError);
    expect(readI32(new Uint8Array(0)).length).toBe(0);
  });
});

describe("code tables", () => {
  it("close codes are PROTOCOL.md's", () => {
    // The table lists what clients can observe; 1006 and 1007 come from the WebSocket layer, never from CLOSE_CODES.
    const spec = readFileSync(join(ROOT, "protocol", "PROTOCOL.md"), "utf8");
    const start = spec.indexOf("## Close codes");
    const section = spec.slice(start, spec.indexOf("\n## ", start + 1));
    const documented = [...section.matchAll(/^\| (\d{4}) \|/gm)].map((m) => Number(m[1]));
    expect(documented).toEqual(
      expect.arrayContaining([1000, 1001, 1002, 1006, 1007, 1009, 4000, 4001, 4002]),
    );
    expect(Object.values(CLOSE_CODES).sort()).toEqual(
      documented.filter((c) => c !== 1006 && c !== 1007).sort(),
    );
  });

  it("error codes are PROTOCOL.md's and the error frame's schema uses them", () => {
    // The normative list is the "Error codes" section of PROTOCOL.md, in its order.
    const spec = readFileSync(join(ROOT, "protocol", "PROTOCOL.md"), "utf8");
    const section = spec.slice(
      spec.indexOf("## Error codes"),
      spec.indexOf("\n## ", spec.indexOf("## Error codes") + 1),
    );
    const documented = [...section.matchAll(/^\| `([a-z_]+)` \|/gm)].map((m) => m[1]);
    expect(documented.length).toBeGreaterThan(5);
    expect([...ERROR_CODES]).toEqual(documented);
    expect(ErrorFrameSchema.properties.code.enum).toEqual([...ERROR_CODES]);
  });
});
