// Generated bad configs, through loadConfig and through `rollgym rollout --config` in process:
// every error names the full dotted key and where it was set (file:line or the override), and
// the CLI prints it as one line with exit 2, nothing on stdout and no trace.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { ConfigError, loadConfig } from "../../src/config/index.ts";
import { FIELD_SPECS, type FieldSpec, holdsMapping } from "../../src/config/schema.ts";
import { runInProcess } from "../cli/in-process.ts";
import { expectUsageError } from "../helpers/cli.ts";
import { yamlFiles } from "./yaml-files.ts";

const RUNS = Number(process.env.ROLLGYM_PROPERTY_RUNS ?? 150);
const { yamlFile } = yamlFiles("bad-config");

/** {a: {b: value}} for "a.b". */
function nested(key: string, value: unknown): Record<string, unknown> {
  return key
    .split(".")
    .reverse()
    .reduce<unknown>((inner, part) => ({ [part]: inner }), value) as Record<string, unknown>;
}

function merge(a: Record<string, unknown>, b: Record<string, unknown>): Record<string, unknown> {
  const out = { ...a };
  for (const [k, v] of Object.entries(b)) {
    const old = out[k];
    const both = [old, v].every((x) => typeof x === "object" && x !== null && !Array.isArray(x));
    out[k] = both ? merge(old as Record<string, unknown>, v as Record<string, unknown>) : v;
  }
  return out;
}

/** The schema a union stands for (its member other than null or "auto"). */
function mainOf(spec: FieldSpec): Record<string, unknown> {
  const node = spec as unknown as Record<string, unknown>;
  const members = node.anyOf as Record<string, unknown>[] | undefined;
  return members?.find((m) => m.type !== "null" && m.const === undefined) ?? node;
}

/** Values no schema of this kind accepts. */
function badValueFor(spec: FieldSpec): fc.Arbitrary<unknown> {
  const text = fc.stringMatching(/^[a-z]{2,8}$/).filter((s) => s !== "auto");
  const main = mainOf(spec);
  if (holdsMapping(spec)) return fc.oneof(fc.integer(), text, fc.constant([1, 2]));
  if (spec["x-coerce"] === "comma") return fc.oneof(text, fc.integer(), fc.constant(["ftp://x"]));
  if (Array.isArray(main.enum)) {
    const aliases = spec["x-config"]?.aliases ?? {};
    return fc.oneof(
      text.filter((s) => !(main.enum as string[]).includes(s) && !(s in aliases)),
      fc.integer(),
    );
  }
  switch (main.type) {
    case "integer":
      return fc.oneof(
        text,
        fc.double({ noInteger: true, noNaN: true, noDefaultInfinity: true }),
        fc.integer({ max: ((main.minimum as number | undefined) ?? 0) - 1, min: -1e9 }),
        fc.constant([1]),
      );
    case "number":
      return fc.oneof(text, fc.constant([0.5]), fc.constant({ x: 1 }), fc.boolean());
    case "boolean":
      return fc.oneof(text, fc.integer(), fc.constant([true]));
    case "array":
      return fc.oneof(fc.integer(), fc.constant({ a: 1 }), fc.constant(true));
    default:
      return fc.oneof(fc.integer(), fc.constant([1]), fc.constant({ a: "b" }));
  }
}

const badLeaf = fc
  .constantFrom(...Object.entries(FIELD_SPECS))
  .chain(([key, spec]) => badValueFor(spec).map((value) => ({ key, value })));

/** A valid key and value that may sit beside the bad one. */
const goodSibling = fc.constantFrom(
  { "agent_proxy.max_turn": 3 },
  { "seed.val": 7 },
  { "trainer.total_epochs": 2 },
  {},
);

function expectLocated(run: () => unknown, key: string, where: RegExp): void {
  let error: unknown;
  try {
    run();
  } catch (e) {
    error = e;
  }
  expect(error, `no error for ${key}`).toBeInstanceOf(ConfigError);
  const message = (error as ConfigError).message;
  // The key itself, or (for a mapping given where a scalar goes) a key below it.
  expect((error as ConfigError).key?.startsWith(key)).toBe(true);
  expect(message).toContain((error as ConfigError).key);
  expect(message).toMatch(where);
}

describe("generated bad configs", () => {
  it("a bad value in a file names the key and file:line, in loadConfig and on the command line", async () => {
    await fc.assert(
      fc.asyncProperty(badLeaf, goodSibling, async ({ key, value }, sibling) => {
        // The sibling first, so the bad leaf wins where the two paths meet.
        let data: Record<string, unknown> = {};
        for (const [k, v] of Object.entries(sibling)) data = merge(data, nested(k, v));
        data = merge(data, nested(key, value));
        const file = yamlFile(stringify(data));
        expectLocated(() => loadConfig({ files: [file] }), key, new RegExp(`set in ${file}:\\d+\\)`));
        expectUsageError(await runInProcess(["rollout", "--config", file]), [key, `${file}:`]);
      }),
      { numRuns: RUNS },
    );
  });

  it("a bad value in an override names the key and the override", async () => {
    await fc.assert(
      fc.asyncProperty(badLeaf, async ({ key, value }) => {
        const override = `${key}=${JSON.stringify(value)}`;
        expectLocated(() => loadConfig({ overrides: [override] }), key, /set in override "/);
        expectUsageError(await runInProcess(["rollout", override]), [key, "override"]);
      }),
      { numRuns: RUNS },
    );
  });

  it("an unknown key under a rollgym group names it in full and where it was set", async () => {
    const groups = [
      "agent_proxy",
      "es_manager.val",
      "rollgym",
      "rollgym.llm",
      "actor_rollout_ref.rollout.val_kwargs",
    ];
    const unknown = fc
      .tuple(fc.constantFrom(...groups), fc.stringMatching(/^[a-z][a-z_]{0,10}$/))
      .map(([group, leaf]) => `${group}.qq_${leaf}`);
    await fc.assert(
      fc.asyncProperty(unknown, fc.jsonValue(), fc.boolean(), async (key, value, inFile) => {
        if (inFile) {
          const file = yamlFile(stringify(nested(key, value ?? 1)));
          expectLocated(() => loadConfig({ files: [file] }), key, new RegExp(`set in ${file}:\\d+\\)`));
        } else {
          const override = `${key}=${JSON.stringify(value)}`;
          expectLocated(() => loadConfig({ overrides: [override] }), key, /set in override/);
        }
      }),
      { numRuns: RUNS },
    );
  });

  it("a custom_envs.<Tag>.env_config value the env refuses names the full key and file:line", async () => {
    const cases = fc.oneof(
      fc
        .double({ min: 1.000001, max: 1e6, noNaN: true })
        .map((v) => ({ tag: "CoordFrozenLake", field: "success_rate", value: v as unknown })),
      fc
        .integer({ min: -1e6, max: 0 })
        .map((v) => ({ tag: "SimpleSokoban", field: "max_steps", value: v as unknown })),
      fc
        .stringMatching(/^[a-z]{3,8}$/)
        .map((v) => ({ tag: "SimpleSokoban", field: `zz_${v}`, value: 1 as unknown })),
    );
    await fc.assert(
      fc.asyncProperty(cases, async ({ tag, field, value }) => {
        const key = `custom_envs.${tag}.env_config.${field}`;
        const file = yamlFile(stringify(nested(key, value)));
        const r = await runInProcess(["envs", "list", "--config", file]);
        expectUsageError(r, [key, `${file}:`]);
      }),
      { numRuns: Math.ceil(RUNS / 2) },
    );
  });

  it("YAML that does not parse is refused with its file:line:col", async () => {
    const broken = fc.oneof(
      fc.stringMatching(/^[a-z]{1,6}$/).map((k) => `${k}: [1, 2\n`),
      fc.stringMatching(/^[a-z]{1,6}$/).map((k) => `${k}:\n  a: 1\n b: 2\n`),
      fc.stringMatching(/^[a-z]{1,6}$/).map((k) => `${k}: "open\n`),
      fc.stringMatching(/^[a-z]{1,6}$/).map((k) => `${k}: {a: 1\n`),
    );
    await fc.assert(
      fc.asyncProperty(broken, async (text) => {
        const file = yamlFile(text);
        expectUsageError(await runInProcess(["rollout", "--config", file]), ["YAML", `${file}:`]);
      }),
      { numRuns: Math.ceil(RUNS / 2) },
    );
  });

  it("a malformed override is named whole", async () => {
    const bad = fc.oneof(
      fc.stringMatching(/^[a-z]{1,6}$/).map((k) => `${k}..x=1`),
      fc.stringMatching(/^[a-z]{1,6}$/).map((k) => `=${k}`),
      fc.stringMatching(/^[a-z]{1,6}$/).map((k) => `${k} x=1`),
      fc.stringMatching(/^[a-z]{1,6}$/).map((k) => `${k}.=1`),
    );
    await fc.assert(
      fc.asyncProperty(bad, async (override) => {
        expectUsageError(await runInProcess(["rollout", override]), [`override "${override}"`]);
      }),
      { numRuns: Math.ceil(RUNS / 2) },
    );
  });
});
