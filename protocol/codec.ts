import { Decoder, Encoder } from "@msgpack/msgpack";
import { decodedSize } from "./decoded-size.ts";

/** WebSocket close codes of PROTOCOL.md ("Close codes"). */
export const CLOSE_CODES = {
  normal: 1000,
  goingAway: 1001,
  undecodable: 1002,
  tooBig: 1009,
  /** A server fault while handling this connection's frame: only this connection ends. */
  internalError: 1011,
  noHello: 4000,
  versionMismatch: 4001,
  resumeRefused: 4002,
  /** A second trainer while the first is connected (PROTOCOL.md "Weight updates"). */
  trainerTaken: 4003,
  /** hello role "trainer" without the server's trainer token, or with another (PROTOCOL.md "Handshake"). */
  trainerToken: 4004,
  /** The client left the server's replies unread (PROTOCOL.md "Backpressure"). */
  slowReader: 4008,
  /** No valid hello within hello_timeout_s, or dropped as the oldest of too many silent sockets. */
  helloTimeout: 4010,
  /** Idle (nothing sent, nothing held) and dropped to make room for a new connection at max_connections. */
  idleDropped: 4011,
} as const;
export type CloseCode = (typeof CLOSE_CODES)[keyof typeof CLOSE_CODES];

/** `error.code` values of PROTOCOL.md ("Error codes"), in the spec's order. */
export const ERROR_CODES = [
  "bad_frame",
  "unknown_type",
  "protocol_version",
  "unknown_session",
  "duplicate_id",
  "unknown_rollout",
  "unknown_group",
  "unknown_tag",
  "limit",
  "unknown_env",
  "episode_done",
  "shutting_down",
  "internal",
  "not_trainer",
  "update",
] as const;
export type ErrorCode = (typeof ERROR_CODES)[number];

/**
 * Deepest array/map nesting a frame may have. Protocol messages nest < 10 levels; the bound keeps
 * recursive consumers (validators, loggers, JSON.stringify) safe from hostile input.
 */
export const MAX_FRAME_DEPTH = 64;

/** A frame that is not exactly one well-formed msgpack value (close code 1002). */
export class FrameDecodeError extends Error {
  override readonly name = "FrameDecodeError";
}

// undefined-valued optional fields are omitted rather than sent as nil, so `{field?: T}` stays absent.
const encoder = new Encoder({ ignoreUndefined: true });
const decoder = new Decoder();
/**
 * Keys a map in a client's frame may have. Client messages use fewer than 20; a map of 90,000
 * short keys costs far more CPU per byte than anything the protocol sends, so it is refused at
 * its header, before any key is decoded.
 */
export const MAX_CLIENT_MAP_KEYS = 256;
const clientDecoder = new Decoder({ maxMapLength: MAX_CLIENT_MAP_KEYS });
/**
 * Heap bytes a client frame may decode to, estimated from its bytes before it is decoded
 * (decoded-size.ts). The protocol's largest frames stay well under it (a megabyte of token ids:
 * 8 MiB; an env_step of 16,384 responses: under 5 MiB), while a megabyte of empty maps would be
 * 64 MiB and of new map keys several hundred. The server decodes one frame at a time, so this
 * bounds what decoded frames hold at once (docs/server.md "Memory bounds, from the limits").
 */
export const MAX_CLIENT_DECODED_BYTES = 16 << 20;

/** Encodes one message as msgpack; Uint8Array values become `bin`. */
export function encodeMessage(message: object): Uint8Array {
  return encoder.encode(message);
}

/**
 * Decodes one binary frame. Throws FrameDecodeError on invalid msgpack, truncation, trailing bytes,
 * `__proto__` keys or nesting deeper than MAX_FRAME_DEPTH. Does not check the value's shape: that is
 * validateClientMessage's job. `bin` values are views into `data` (no copy). A frame `from` a
 * client may not hold maps of more than MAX_CLIENT_MAP_KEYS keys, nor decode to more than
 * MAX_CLIENT_DECODED_BYTES (both refused before the value is built).
 */
export function decodeFrame(data: Uint8Array, from: "client" | "any" = "any"): unknown {
  if (from === "client") checkDecodedSize(data);
  let value: unknown;
  try {
    value = (from === "client" ? clientDecoder : decoder).decode(data);
  } catch (err) {
    throw new FrameDecodeError(`undecodable frame: ${err instanceof Error ? err.message : String(err)}`, {
      cause: err,
    });
  }
  if (typeof value === "object" && value !== null) checkDepth(value);
  return value;
}

function checkDecodedSize(data: Uint8Array): void {
  const bytes = decodedSize(data, MAX_CLIENT_DECODED_BYTES, MAX_CLIENT_MAP_KEYS, MAX_FRAME_DEPTH);
  if (bytes === Number.POSITIVE_INFINITY)
    throw new FrameDecodeError(`undecodable frame: nesting deeper than ${MAX_FRAME_DEPTH}`);
  if (bytes > MAX_CLIENT_DECODED_BYTES)
    throw new FrameDecodeError(
      `undecodable frame: its ${data.byteLength} bytes would decode to more than ${MAX_CLIENT_DECODED_BYTES} bytes of memory (MAX_CLIENT_DECODED_BYTES; many small maps, arrays, strings or new map keys)`,
    );
}

// Iterative so that the check itself cannot overflow the stack.
function checkDepth(root: object): void {
  const values: unknown[] = [root];
  const depths: number[] = [1];
  while (values.length > 0) {
    const value = values.pop();
    const depth = depths.pop()!;
    if (depth > MAX_FRAME_DEPTH) {
      throw new FrameDecodeError(`undecodable frame: nesting deeper than ${MAX_FRAME_DEPTH}`);
    }
    if (Array.isArray(value)) {
      for (const item of value) {
        if (typeof item === "object" && item !== null) {
          values.push(item);
          depths.push(depth + 1);
        }
      }
    } else if (typeof value === "object" && value !== null && !ArrayBuffer.isView(value)) {
      for (const key in value) {
        const item = (value as Record<string, unknown>)[key];
        if (typeof item === "object" && item !== null) {
          values.push(item);
          depths.push(depth + 1);
        }
      }
    }
  }
}

// Typed arrays use host byte order; the wire is little-endian, so big-endian hosts go through DataView.
const HOST_LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** Little-endian int32 bytes for a `*_i32` field. Throws RangeError on non-int32 values (no silent wrap). */
export function i32Bin(values: ArrayLike<number>): Uint8Array {
  return i32BinOf([values]);
}

/** i32Bin of the parts one after another, without building their concatenation first. */
export function i32BinOf(parts: readonly ArrayLike<number>[]): Uint8Array {
  const out = new Uint8Array(totalLength(parts) * 4);
  const view = HOST_LITTLE_ENDIAN ? new Int32Array(out.buffer) : null;
  const dv = view ? null : new DataView(out.buffer);
  let at = 0;
  for (const values of parts) {
    const n = values.length;
    for (let i = 0; i < n; i++, at++) {
      const v = values[i];
      if ((v | 0) !== v) throw new RangeError(`i32Bin: values[${at}] = ${v} is not an int32`);
      if (view) view[at] = v;
      else dv!.setInt32(at * 4, v, true);
    }
  }
  return out;
}

/** uint8 bytes for a `*_u8` field (booleans become 0/1). Throws RangeError on values outside 0..255. */
export function u8Bin(values: ArrayLike<number | boolean>): Uint8Array {
  return u8BinOf([values]);
}

/** u8Bin of the parts one after another. */
export function u8BinOf(parts: readonly ArrayLike<number | boolean>[]): Uint8Array {
  const out = new Uint8Array(totalLength(parts));
  let at = 0;
  for (const values of parts) {
    const n = values.length;
    for (let i = 0; i < n; i++, at++) {
      const v = values[i];
      if (typeof v === "boolean") out[at] = v ? 1 : 0;
      else if ((v & 0xff) === v) out[at] = v;
      else throw new RangeError(`u8Bin: values[${at}] = ${v} is not a uint8`);
    }
  }
  return out;
}

/** Little-endian float32 bytes for a `*_f32` field (values round to float32; NaN/±Infinity/-0 kept). */
export function f32Bin(values: ArrayLike<number>): Uint8Array {
  return f32BinOf([values]);
}

/** f32Bin of the parts one after another. */
export function f32BinOf(parts: readonly ArrayLike<number>[]): Uint8Array {
  const n = totalLength(parts);
  if (HOST_LITTLE_ENDIAN) {
    const arr = new Float32Array(n);
    let at = 0;
    // An element loop, not arr.set: set() from a JS array with holes (token logs' arrays are
    // made with new Array(n)) takes its slow path, measured about 2× slower per element.
    for (const values of parts) {
      const count = values.length;
      for (let i = 0; i < count; i++, at++) arr[at] = values[i];
    }
    return new Uint8Array(arr.buffer);
  }
  const out = new Uint8Array(n * 4);
  const dv = new DataView(out.buffer);
  let at = 0;
  for (const values of parts)
    for (let i = 0; i < values.length; i++, at++) dv.setFloat32(at * 4, values[i], true);
  return out;
}

/** The wire bytes (little-endian) of a `*_f32` field held as a Float32Array: a view of it on a little-endian host. */
export function f32Bytes(values: Float32Array): Uint8Array {
  return HOST_LITTLE_ENDIAN
    ? new Uint8Array(values.buffer, values.byteOffset, values.byteLength)
    : f32Bin(values);
}

/** The wire bytes of a `*_i32` field held as an Int32Array, as f32Bytes. */
export function i32Bytes(values: Int32Array): Uint8Array {
  return HOST_LITTLE_ENDIAN
    ? new Uint8Array(values.buffer, values.byteOffset, values.byteLength)
    : i32Bin(values);
}

function totalLength(parts: readonly ArrayLike<unknown>[]): number {
  let n = 0;
  for (const values of parts) n += values.length;
  return n;
}

function checkWidth(bin: Uint8Array, width: number, what: string): number {
  if (!(bin instanceof Uint8Array)) throw new TypeError(`${what}: expected a Uint8Array (msgpack bin)`);
  if (bin.byteLength % width !== 0) {
    throw new RangeError(`${what}: ${bin.byteLength} bytes is not a multiple of ${width}`);
  }
  return bin.byteLength / width;
}

/**
 * The bytes in a buffer of their own. Not `bin.slice()`: on a Node Buffer (what a decode of a
 * Buffer yields) slice is a view into the same, larger pool.
 */
function copyOf(bin: Uint8Array): Uint8Array {
  return Uint8Array.prototype.slice.call(bin);
}

/**
 * Reads a `*_i32` bin. Aligned input on little-endian hosts is returned as a view sharing `bin`'s
 * memory (no copy); misaligned input is copied.
 */
export function readI32(bin: Uint8Array): Int32Array {
  const n = checkWidth(bin, 4, "readI32");
  if (HOST_LITTLE_ENDIAN) {
    if (bin.byteOffset % 4 === 0) return new Int32Array(bin.buffer, bin.byteOffset, n);
    return new Int32Array(copyOf(bin).buffer);
  }
  const out = new Int32Array(n);
  const dv = new DataView(bin.buffer, bin.byteOffset, bin.byteLength);
  for (let i = 0; i < n; i++) out[i] = dv.getInt32(i * 4, true);
  return out;
}

/** Reads a `*_u8` bin (returns `bin` itself: bytes need no conversion). */
export function readU8(bin: Uint8Array): Uint8Array {
  checkWidth(bin, 1, "readU8");
  return bin;
}

/** Reads a `*_f32` bin; same sharing rules as readI32. Float bits (NaN payloads included) are kept. */
export function readF32(bin: Uint8Array): Float32Array {
  const n = checkWidth(bin, 4, "readF32");
  if (HOST_LITTLE_ENDIAN) {
    if (bin.byteOffset % 4 === 0) return new Float32Array(bin.buffer, bin.byteOffset, n);
    return new Float32Array(copyOf(bin).buffer);
  }
  // Byte-swap via Uint32 so NaN payloads survive (DataView.getFloat32 may canonicalise them).
  const out = new Float32Array(n);
  const bits = new Uint32Array(out.buffer);
  const dv = new DataView(bin.buffer, bin.byteOffset, bin.byteLength);
  for (let i = 0; i < n; i++) bits[i] = dv.getUint32(i * 4, true);
  return out;
}
