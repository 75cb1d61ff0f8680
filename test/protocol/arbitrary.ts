// fast-check arbitraries derived from the protocol's TypeBox schemas, so every schema change is
// covered by the round-trip and validation properties without hand-written generators.
import fc from "fast-check";

type SchemaNode = Record<string, unknown>;

/** One Unicode scalar value (no lone surrogates: msgpack strings are UTF-8). */
const codePoint: fc.Arbitrary<string> = fc.oneof(
  { weight: 4, arbitrary: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)) },
  {
    weight: 1,
    arbitrary: fc
      .integer({ min: 0, max: 0x10ffff })
      .filter((c) => c < 0xd800 || c > 0xdfff)
      .map((c) => String.fromCodePoint(c)),
  },
);

function text(minLength: number, maxLength: number): fc.Arbitrary<string> {
  return fc.string({ unit: codePoint, minLength, maxLength });
}

const key = text(0, 8).filter((k) => k !== "__proto__");

/** Finite doubles without -0 (msgpack encodes -0 as the integer 0). */
function finite(options: fc.DoubleConstraints = {}): fc.Arbitrary<number> {
  return fc
    .double({ noNaN: true, noDefaultInfinity: true, ...options })
    .map((v) => (Object.is(v, -0) ? 0 : v));
}

/** Any msgpack-representable value that round-trips unchanged. */
export const anyValue: fc.Arbitrary<unknown> = fc.letrec<{ value: unknown }>((tie) => ({
  value: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    fc.constant(null),
    fc.boolean(),
    fc.integer(),
    finite(),
    text(0, 12),
    fc.uint8Array({ maxLength: 8 }),
    fc.array(tie("value"), { maxLength: 3 }),
    fc.dictionary(key, tie("value"), { maxKeys: 3 }),
  ),
})).value;

function integer(lo: number, hi: number): fc.Arbitrary<number> {
  const any = fc.bigInt({ min: BigInt(lo), max: BigInt(hi) }).map(Number);
  return fc.oneof(any, fc.constantFrom(lo, hi));
}

/** An arbitrary producing values the schema accepts. */
export function arbitraryFor(schema: object): fc.Arbitrary<unknown> {
  const node = schema as SchemaNode;
  if (node["description"] === "msgpack bin") return fc.uint8Array({ maxLength: 32 });
  if (Array.isArray(node["enum"])) return fc.constantFrom(...(node["enum"] as unknown[]));
  if (node["const"] !== undefined) return fc.constant(node["const"]);
  if (Array.isArray(node["anyOf"])) return fc.oneof(...(node["anyOf"] as SchemaNode[]).map(arbitraryFor));
  switch (node["type"]) {
    case "integer": {
      const lo = (node["minimum"] as number | undefined) ?? Number.MIN_SAFE_INTEGER;
      const hi = (node["maximum"] as number | undefined) ?? Number.MAX_SAFE_INTEGER;
      return integer(lo, hi);
    }
    case "number": {
      const min = (node["minimum"] ?? node["exclusiveMinimum"]) as number | undefined;
      const max = (node["maximum"] ?? node["exclusiveMaximum"]) as number | undefined;
      return finite({
        min,
        max,
        minExcluded: node["exclusiveMinimum"] !== undefined,
        maxExcluded: node["exclusiveMaximum"] !== undefined,
      });
    }
    case "string": {
      const min = (node["minLength"] as number | undefined) ?? 0;
      const max = (node["maxLength"] as number | undefined) ?? 24;
      // Mostly short strings, sometimes exactly the limit.
      return fc.oneof(text(min, Math.min(max, Math.max(min, 24))), text(max, max));
    }
    case "boolean":
      return fc.boolean();
    case "null":
      return fc.constant(null);
    case "array": {
      const min = (node["minItems"] as number | undefined) ?? 0;
      const max = Math.min((node["maxItems"] as number | undefined) ?? 4, Math.max(min, 4));
      return fc.array(arbitraryFor(node["items"] as SchemaNode), { minLength: min, maxLength: max });
    }
    case "object": {
      const props = node["properties"] as Record<string, SchemaNode> | undefined;
      const patterns = Object.entries((node["patternProperties"] as Record<string, SchemaNode>) ?? {});
      // A record with a key pattern (sampling.logit_bias): keys matching it, values its schema.
      // Records of any key (metrics: "^.*$") keep the general generator below.
      const [pattern, value] = patterns.find(([p]) => p !== "^.*$") ?? [];
      if (pattern !== undefined && value !== undefined) {
        const matching = fc.stringMatching(new RegExp(pattern)).filter((k) => k !== "__proto__");
        return fc.dictionary(matching, arbitraryFor(value), { maxKeys: 4 });
      }
      if (props === undefined) return fc.dictionary(key, anyValue, { maxKeys: 4 });
      const model: Record<string, fc.Arbitrary<unknown>> = {};
      for (const [name, schema] of Object.entries(props)) model[name] = arbitraryFor(schema);
      return fc.record(model, { requiredKeys: (node["required"] as string[] | undefined) ?? [] });
    }
    default:
      return anyValue; // Type.Unknown()
  }
}
