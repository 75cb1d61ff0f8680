// logit_bias, the sampling field added through the settings table alone: a config key (with its
// entries set one by one, like any mapping), a wire field (null: none, over the configuration),
// a request-body field, and errors naming the key, the value, what is allowed and where.
import { describe, expect, it } from "vitest";
import { type RolloutRequest, validateClientMessage } from "../../protocol/messages.ts";
import { ConfigError, defaultConfig, loadConfig } from "../../src/config/index.ts";
import { extraBodyProblem } from "../../src/llm/extra-body.ts";
import { samplingFields } from "../../src/llm/generation.ts";
import { configuredFrame, resolveRequest } from "../../src/rollout/request.ts";
import { yamlFiles } from "./yaml-files.ts";

const { yamlFile } = yamlFiles("logit-bias");
const KEY = "rollgym.llm.logit_bias";

function configError(run: () => unknown): ConfigError {
  try {
    run();
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  throw new Error("no ConfigError");
}

const frame = (sampling: Record<string, unknown>): Record<string, unknown> => ({
  type: "rollout",
  id: "r",
  tags: [{ tag: "Bandit", groups: 1 }],
  mode: "train",
  group_size: 1,
  delivery: "batch",
  sampling,
});

describe("logit_bias", () => {
  it("is a config key (default null: none) whose entries merge across sources", () => {
    expect(defaultConfig().rollgym.llm.logit_bias).toBeNull();
    expect(resolveRequest(defaultConfig()).sampling).not.toHaveProperty("logit_bias");
    const file = yamlFile("rollgym:\n  llm:\n    logit_bias: {15043: -100, 7: 2.5}\n");
    const { config } = loadConfig({ files: [file], overrides: [`${KEY}.9=1`, `~${KEY}.7`] });
    expect(config.rollgym.llm.logit_bias).toEqual({ "9": 1, "15043": -100 });
    for (const mode of ["train", "val"] as const) {
      expect(resolveRequest(config, configuredFrame(config, mode)).sampling.logit_bias).toEqual({
        "9": 1,
        "15043": -100,
      });
    }
  });

  it("refuses a key that is no token id or a bias past ±100, naming the key, value, range and file:line", () => {
    const file = yamlFile("agent_proxy:\n  max_turn: 3\nrollgym:\n  llm:\n    logit_bias:\n      hello: 1\n");
    const error = configError(() => loadConfig({ files: [file] }));
    expect(error.key).toBe(KEY);
    expect(error.message).toBe(
      `invalid value for ${KEY}: {"hello":1}; allowed: a mapping of token ids to biases from -100 to 100, or null (set in ${file}:6)`,
    );
    const over = configError(() => loadConfig({ overrides: [`${KEY}={1: 101}`] }));
    expect(over.message).toContain(`{"1":101}; allowed: a mapping of token ids to biases from -100 to 100`);
    expect(over.message).toContain(`(set in override "${KEY}={1: 101}")`);
  });

  it("is a wire field laid over the configuration; null removes the configured bias", () => {
    const { config } = loadConfig({ overrides: [`${KEY}={5: -100}`] });
    const given = validateClientMessage(frame({ logit_bias: { "7": 3 } }));
    expect(given.ok).toBe(true);
    const request = (f: unknown) => resolveRequest(config, f as RolloutRequest);
    expect(request(frame({ logit_bias: { "7": 3 } })).sampling.logit_bias).toEqual({ "7": 3 });
    expect(request(frame({ temperature: 0.5 })).sampling.logit_bias).toEqual({ "5": -100 });
    expect(request(frame({ logit_bias: null })).sampling).not.toHaveProperty("logit_bias");
    expect(validateClientMessage(frame({ logit_bias: { x: 1 } }))).toMatchObject({
      ok: false,
      field: "sampling.logit_bias.x",
    });
    expect(validateClientMessage(frame({ logit_bias: { "1": -101 } }))).toMatchObject({
      ok: false,
      message: "sampling.logit_bias[1]: got -101, expected a finite number in [-100, 100]",
    });
    expect(validateClientMessage(frame({ logit_bias: new Uint8Array(2) }))).toMatchObject({ ok: false });
  });

  it("goes into both dialects' request bodies, and an extra_body copy is refused with the key to use", () => {
    const sampling = {
      ...resolveRequest(defaultConfig()).sampling,
      logit_bias: { "3": -100 },
      seed: 1,
    };
    expect(samplingFields(sampling, "vllm").logit_bias).toEqual({ "3": -100 });
    expect(samplingFields(sampling, "llamacpp").logit_bias).toEqual({ "3": -100 });
    expect(extraBodyProblem({ logit_bias: {} })?.reason).toContain(KEY);
  });
});
