// JSON from outside (OpenEnv frames, remote env answers, HTTP bodies, episode files), bounded
// before anything walks it. V8's JSON.parse is iterative and accepts any nesting, but most code
// that walks a value afterwards (JSON.stringify, structured clone, validators, error previews)
// recurses, and a few kilobytes of "[[[[…" overflow the stack there. So the nesting is counted on
// the text first, in one pass that allocates nothing, and values are echoed in errors only as
// short previews that never recurse deeper than a few levels.

/** Nesting any JSON message rollgym reads may have (its own use fewer than ten levels). */
export const MAX_JSON_DEPTH = 64;

/** Characters of a value an error message echoes. */
export const PREVIEW_CHARS = 60;

export class JsonTooDeepError extends Error {
  readonly depth: number;
  constructor(depth: number) {
    super(`nested deeper than ${depth} levels`);
    this.name = "JsonTooDeepError";
    this.depth = depth;
  }
}

/**
 * The offset of the bracket that takes `text[from, to)` deeper than `max` levels of arrays and
 * objects, or -1. Strings are skipped; a newline ends a value when `lines` is set (JSON lines).
 */
export function deeperThan(text: string, max: number, lines = false, from = 0, to = text.length): number {
  let depth = 0;
  let inString = false;
  for (let i = from; i < to; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c)
        i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > max) return i;
    } else if (c === 0x5d || c === 0x7d) depth--;
    else if (c === 0x0a && lines) depth = 0;
  }
  return -1;
}

/** JSON.parse after the nesting check: throws JsonTooDeepError or JSON.parse's SyntaxError. */
export function parseJson(text: string, maxDepth: number = MAX_JSON_DEPTH): unknown {
  if (deeperThan(text, maxDepth) >= 0) throw new JsonTooDeepError(maxDepth);
  return JSON.parse(text);
}

/** `text` cut to at most `chars` characters, "..." marking a cut. */
export function clip(text: string, chars: number = PREVIEW_CHARS): string {
  return text.length > chars ? `${text.slice(0, chars - 3)}...` : text;
}

/**
 * A value as an error message shows it: JSON-like, at most `chars` characters, at most three
 * levels deep and a few items wide, whatever the value (deep, wide, huge, cyclic, a BigInt).
 */
export function preview(value: unknown, chars: number = PREVIEW_CHARS): string {
  const out: string[] = [];
  let length = 0;
  const push = (s: string): boolean => {
    out.push(s);
    length += s.length;
    return length <= chars;
  };
  const walk = (v: unknown, depth: number): boolean => {
    if (typeof v === "string") return push(JSON.stringify(v.length > chars ? v.slice(0, chars) : v));
    if (typeof v === "bigint") return push(`${v}n`);
    if (typeof v !== "object" || v === null) return push(String(v));
    if (depth >= 3) return push(Array.isArray(v) ? "[…]" : "{…}");
    if (ArrayBuffer.isView(v)) return push(`<${v.byteLength} bytes>`);
    if (Array.isArray(v)) {
      if (!push("[")) return false;
      for (let i = 0; i < v.length; i++) {
        if (i > 0 && !push(",")) return false;
        if (i === 8) return push("…");
        if (!walk(v[i], depth + 1)) return false;
      }
      return push("]");
    }
    if (!push("{")) return false;
    let n = 0;
    for (const key in v) {
      if (!Object.hasOwn(v, key)) continue;
      if (n > 0 && !push(",")) return false;
      if (n++ === 8) return push("…");
      if (!push(`${JSON.stringify(key.length > chars ? key.slice(0, chars) : key)}:`)) return false;
      if (!walk((v as Record<string, unknown>)[key], depth + 1)) return false;
    }
    return push("}");
  };
  walk(value, 0);
  return clip(out.join(""), chars);
}
