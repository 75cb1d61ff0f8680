// The conformance check on every shipped tag and on the documented user env, and proof that
// the check catches a broken env.
import { describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import { checkConformance } from "../../envs/conformance.ts";
import { EnvRegistry } from "../../envs/registry.ts";
import type { Env } from "../../envs/types.ts";
import { numberLine, registerNumberLine } from "../../examples/number-line.ts";

const registry = createRegistry();
registerNumberLine(registry);

describe("conformance", () => {
  for (const name of registry.tagNames()) {
    it(`${name} passes every check`, async () => {
      const checks = await checkConformance(registry.tag(name));
      expect(checks.filter((c) => !c.ok)).toEqual([]);
      expect(checks.map((c) => c.name)).toContain("snapshot survives encode/decode");
    });
  }

  it("the user env is reachable through the registry like RAGEN's", () => {
    const tag = registry.tag("NumberLine");
    const env = tag.make();
    expect(env.reset(5)).toMatch(/^[_PT]{9}$/);
    expect(tag.config).toEqual({ length: 9 });
  });

  it("flags an env whose reset ignores the seed and that steps after done", async () => {
    const broken = new EnvRegistry();
    broken.registerType({
      ...numberLine,
      name: "broken",
      create: (config) => {
        const env = numberLine.create(config);
        let calls = 0;
        const wrapped: Env = {
          get actionNames() {
            return env.actionNames;
          },
          get done() {
            return false;
          },
          reset: () => env.reset(calls++), // depends on call count, not the seed
          step: (a) => env.step(a),
          render: () => env.render(),
          snapshot: () => env.snapshot(),
          restore: (s) => env.restore(s),
        };
        return wrapped;
      },
    });
    const tag = broken.registerTag({
      tag: "Broken",
      env_type: "broken",
      max_actions_per_traj: 3,
      env_instruction: "",
      max_tokens: 10,
      env_config: null,
    });
    const failed = (await checkConformance(tag)).filter((c) => !c.ok).map((c) => c.name);
    expect(failed).toContain("same seed, same episode");
  });

  it("refuses unknown config keys and bad values naming the field", () => {
    const r = new EnvRegistry();
    r.registerType(numberLine);
    const base = {
      tag: "X",
      env_type: "number_line",
      max_actions_per_traj: 2,
      env_instruction: "",
      max_tokens: 1,
    };
    expect(() => r.registerTag({ ...base, env_config: { lenght: 3 } })).toThrow(
      /lenght: unknown number_line config key; allowed: length/,
    );
    expect(() => r.registerTag({ ...base, env_config: { length: 1 } })).toThrow(
      /length: 1 is not an integer in \[2, 100\]/,
    );
    expect(() => r.registerTag({ ...base, env_type: "nope", env_config: null })).toThrow(
      /env_type: "nope" is not a registered env type/,
    );
    const sok = createRegistry();
    expect(() =>
      sok.registerTag({ ...base, env_type: "sokoban", env_config: { observation_format: "ascii" } }),
    ).toThrow(/observation_format: "ascii" is not one of grid, coord, grid_coord/);
    expect(() => sok.registerTag({ ...base, env_type: "sokoban", env_config: { dim_x: 6 } })).toThrow(
      /dim_x and dim_y go together/,
    );
    expect(() =>
      sok.registerTag({ ...base, env_type: "frozen_lake", env_config: { success_rate: 2 } }),
    ).toThrow(/success_rate/);
    expect(() => sok.registerTag({ ...base, env_type: "bandit", env_config: { split: "val" } })).toThrow(
      /split: "val" is not one of train, test/,
    );
  });
});
