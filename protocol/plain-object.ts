// What counts as a map, in a module that imports nothing so the web page can load it as it is.

/**
 * A plain object: made by a literal, JSON, YAML or msgpack's map decoding, or with no prototype.
 * Arrays, msgpack's bin (Uint8Array) and timestamps (Date) and class instances are not.
 */
export function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== "object" || value === null) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}
