// What decoding a msgpack frame would allocate on V8's heap, estimated from its bytes alone
// (no value is built), so that a client frame whose decoding would cost far more than its
// size can be refused before it is decoded (docs/server.md "Memory bounds, from the limits").
// A byte of msgpack can decode to 64 bytes of heap (an empty map and its slot), where a
// megabyte of text decodes to one or two.

/**
 * Heap bytes charged per decoded item: what the decoded value keeps alive while it is built and
 * handled (measured with @msgpack/msgpack 3 on Node 24, rounded up). Garbage made while decoding
 * (a short string's code units) dies young and is not counted.
 */
export const DECODED_COST = {
  /** A child's slot in its array (nil, booleans and small integers need nothing more). */
  slot: 8,
  /** A map's object with its in-object property slots. */
  map: 56,
  /** Each key of a map: its property's storage. */
  key: 72,
  /** A key the frame has not used before at that place in a map of that shape: a new hidden class, and its key string (plus 2 per byte). */
  newShape: 128,
  /** An array's object and header. */
  array: 32,
  /** A float's heap number. */
  float: 16,
  /** A string, plus 2 per byte. */
  string: 24,
  /** A bin or ext: a typed-array view on the frame. */
  bin: 104,
} as const;

/**
 * An upper estimate of the heap bytes `data` decodes to, counting up to `limit`: the count stops
 * as soon as it passes `limit` (then the returned value is > limit). Infinity when containers nest
 * deeper than `maxDepth` (a megabyte of nested one-item arrays decodes to a million arrays before a
 * depth check on the value could run). Malformed or truncated input, or a map of more than
 * `maxMapKeys` keys, ends the count where it breaks: the decoder refuses those itself.
 */
export function decodedSize(data: Uint8Array, limit: number, maxMapKeys: number, maxDepth: number): number {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  // Per open container: items still to read (a map's keys and values both count), whether it is
  // a map, and its shape so far (a hash of its keys in order).
  const left: number[] = [];
  const isMap: boolean[] = [];
  const shape: number[] = [];
  const shapes = new Set<number>();
  let cost = 0;
  let p = 0;
  let rootRead = false;

  while (p < data.byteLength && cost <= limit) {
    const depth = left.length - 1;
    if (depth < 0) {
      if (rootRead) break; // trailing bytes: the decoder refuses them
      rootRead = true;
    }
    if (depth >= 0 && !isMap[depth]) {
      // An array's one-byte scalars (token ids, mostly), skipped in a tight loop: their slots were charged.
      let n = left[depth];
      while (n > 1 && p < data.byteLength && isOneByteScalar(data[p])) {
        p++;
        n--;
      }
      left[depth] = n;
    }
    // A map's items alternate key, value: an even count left means a key comes next.
    const key = depth >= 0 && isMap[depth] && left[depth] % 2 === 0;
    if (depth >= 0) left[depth]--;
    const start = p;
    const b = data[p++];
    let str = -1;
    let container = -1;
    let map = false;
    if (isOneByteScalar(b)) {
      // its slot is all it needs
    } else if (b <= 0x8f) {
      container = b & 0x0f;
      map = true;
    } else if (b <= 0x9f) container = b & 0x0f;
    else if (b <= 0xbf) str = b & 0x1f;
    else if (b >= 0xd9 && b <= 0xdb) {
      str = lengthAt(view, p, 1 << (b - 0xd9));
      p += 1 << (b - 0xd9);
    } else if (b >= 0xcc && b <= 0xd3) p += 1 << (b & 0x03);
    else if (b === 0xca || b === 0xcb) {
      p += b === 0xca ? 4 : 8;
      cost += DECODED_COST.float;
    } else if (b >= 0xc4 && b <= 0xc9) {
      // bin 8/16/32, ext 8/16/32 (an ext also has its type byte)
      const ext = b >= 0xc7 ? 1 : 0;
      const bytes = 1 << (b - 0xc4 - 3 * ext);
      const n = lengthAt(view, p, bytes);
      if (n < 0) break;
      p += bytes + n + ext;
      cost += DECODED_COST.bin;
    } else if (b >= 0xd4 && b <= 0xd8) {
      p += 1 + (1 << (b - 0xd4));
      cost += DECODED_COST.bin;
    } else if (b >= 0xdc && b <= 0xdf) {
      // array 16/32, map 16/32
      container = lengthAt(view, p, b & 1 ? 4 : 2);
      p += b & 1 ? 4 : 2;
      map = b >= 0xde;
    } else break; // 0xc1: never used; the decoder refuses it
    if (b >= 0xd9 && b <= 0xdb && str < 0) break;
    if (b >= 0xdc && b <= 0xdf && container < 0) break;
    if (str >= 0) p += str;
    if (key) {
      // A map's hidden class follows the sequence of its keys: a new step is a new shape.
      const next = hashStep(shape[depth], data, start, p);
      shape[depth] = next;
      cost += DECODED_COST.key;
      if (!shapes.has(next)) {
        shapes.add(next);
        cost += DECODED_COST.newShape + 2 * (p - start);
      }
    } else {
      // A map's values sit in its keys' storage; an array's elements were charged at its header.
      if (str >= 0) cost += DECODED_COST.string + 2 * str;
    }
    if (container >= 0) {
      // An array's slots are charged at its header: one claiming more elements than the frame
      // has bytes for is refused before the decoder allocates for them.
      cost += map ? DECODED_COST.map : DECODED_COST.array + DECODED_COST.slot * container;
      if (left.length >= maxDepth) return Number.POSITIVE_INFINITY;
      if (map && container > maxMapKeys) break;
      if (container > 0) {
        left.push(map ? 2 * container : container);
        isMap.push(map);
        shape.push(0);
        continue;
      }
    }
    // Close every container this item completed.
    while (left.length > 0 && left[left.length - 1] === 0) {
      left.pop();
      isMap.pop();
      shape.pop();
    }
  }
  return cost;
}

/** A positive or negative fixint, nil, false or true. */
function isOneByteScalar(b: number): boolean {
  return b <= 0x7f || b >= 0xe0 || b === 0xc0 || b === 0xc2 || b === 0xc3;
}

/** The big-endian length field of `bytes` bytes at `at`, or -1 past the end. */
function lengthAt(view: DataView, at: number, bytes: number): number {
  if (at + bytes > view.byteLength) return -1;
  return bytes === 1 ? view.getUint8(at) : bytes === 2 ? view.getUint16(at) : view.getUint32(at);
}

/** The next step of a key sequence's hash (FNV-1a over the key's bytes, seeded by the sequence so far). */
function hashStep(seed: number, data: Uint8Array, from: number, to: number): number {
  let h = (seed ^ 0x811c9dc5) >>> 0;
  for (let i = from; i < to && i < data.length; i++) h = Math.imul(h ^ data[i], 0x01000193) >>> 0;
  return Math.imul(h ^ seed, 0x9e3779b1) >>> 0;
}
