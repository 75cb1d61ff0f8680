// protocol/openenv.ts: the one declaration of OpenEnv's messages. Its JSON Schema for the Python
// provider must be current; the entries fieldErrors writes must agree with TypeBox on what fits
// (a value TypeBox refuses always gets an entry naming a field, one it takes gets none); a
// remote's answer is read through it.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import fc from "fast-check";
import type { TSchema } from "typebox";
import { Compile } from "typebox/compile";
import { describe, expect, it } from "vitest";
import {
  checkAnswer,
  checkMessage,
  fieldErrors,
  OPENENV_ANSWERS,
  OPENENV_CLIENT_MESSAGES,
  ResetRequestSchema,
  type SchemaNode,
  StepRequestSchema,
} from "../../protocol/openenv.ts";
import { openenvJsonSchema } from "../../protocol/openenv-json.ts";
import { ROOT } from "../helpers/cli.ts";

describe("python/rollgym_envs/openenv_schema.json", () => {
  it("matches protocol/openenv.ts (regenerate with: node protocol/openenv-json.ts > python/rollgym_envs/openenv_schema.json)", () => {
    const file = join(ROOT, "python", "rollgym_envs", "openenv_schema.json");
    expect(readFileSync(file, "utf8")).toBe(openenvJsonSchema());
  });
});

/** Values near the schemas' edges: their fields, their types and their bounds. */
const leaf = fc.oneof(
  fc.constantFrom(null, true, 0, -1, 1.5, 3, 2 ** 32 - 1, 2 ** 32, "", "Up", "x".repeat(256), [], {}),
  fc.string(),
  fc.integer(),
  fc.double(),
);
const field = fc.constantFrom(
  "type",
  "data",
  "seed",
  "episode_id",
  "action",
  "metadata",
  "extra",
  "__proto__",
);
const typed = fc.constantFrom("reset", "step", "state", "close", "observation", "error");
const value: fc.Arbitrary<unknown> = fc.letrec<{ node: unknown }>((tie) => ({
  node: fc.oneof(
    { depthSize: "small" },
    leaf,
    fc.array(tie("node"), { maxLength: 3 }),
    fc.dictionary(field, tie("node"), { maxKeys: 4 }),
    fc.record({ type: typed, data: tie("node") }, { requiredKeys: ["type"] }),
  ),
})).node;

describe("fieldErrors agrees with TypeBox", () => {
  const schemas: [string, TSchema][] = [
    ...Object.entries(OPENENV_CLIENT_MESSAGES),
    ...Object.entries(OPENENV_ANSWERS).map(([k, s]): [string, TSchema] => [`answer ${k}`, s]),
    ["reset request", ResetRequestSchema],
    ["step request", StepRequestSchema],
  ];
  for (const [name, schema] of schemas)
    it(`${name}: no entry for what fits, an entry naming the field for what does not`, () => {
      const check = Compile(schema);
      fc.assert(
        fc.property(value, (v) => {
          const errors = fieldErrors(schema as unknown as SchemaNode, v, []);
          expect(errors.length === 0).toBe(check.Check(v));
          for (const e of errors) expect(e.msg).toMatch(/^(must be|is required|is not a field here)/);
        }),
        { numRuns: 500 },
      );
    });
});

describe("checkMessage", () => {
  it("takes OpenEnv's messages as they are", () => {
    for (const message of [
      { type: "reset" },
      { type: "reset", data: null },
      { type: "reset", data: { seed: 0, episode_id: "e" } },
      { type: "step", data: { action: "Up", metadata: {} } },
      { type: "state" },
      { type: "close" },
    ])
      expect(checkMessage(message)).toEqual({ ok: true, value: message });
  });

  it("names an unknown type apart from a bad message", () => {
    expect(checkMessage({ type: "mcp", data: {} })).toEqual({ ok: false, unknownType: "mcp" });
    expect(checkMessage({ type: "toString" })).toEqual({ ok: false, unknownType: "toString" });
  });
});

describe("checkAnswer", () => {
  it("reads an observation, a state and an error; says what is wrong with anything else", () => {
    const observation = {
      type: "observation",
      data: { observation: { text: "t" }, reward: null, done: false },
    };
    expect(checkAnswer(observation)).toEqual({ ok: true, answer: observation });
    expect(checkAnswer({ type: "state", data: {} }).ok).toBe(true);
    expect(checkAnswer({ type: "error", data: { message: "m", code: "EXECUTION_ERROR" } }).ok).toBe(true);
    const problems: [unknown, string][] = [
      [[1], '[1], not {"type": …, "data": {…}}'],
      [{ type: "observation" }, '{"type":"observation"}, not {"type": …, "data": {…}}'],
      [{ type: "mcp", data: {} }, 'a "mcp" message, not one of observation, state, error'],
      [
        { type: "observation", data: { observation: {}, reward: "1", done: false } },
        'data.reward: must be a number or null, not "1"',
      ],
      [
        { type: "observation", data: { observation: [], done: false } },
        "data.observation: must be an object of the observation's fields, not []",
      ],
      [{ type: "observation", data: { observation: {} } }, "data.done: is required: a boolean"],
      [{ type: "error", data: { message: "m", code: 5 } }, "data.code: must be a string, not 5"],
    ];
    for (const [answer, problem] of problems) expect(checkAnswer(answer)).toEqual({ ok: false, problem });
  });
});
