// The engine-facing config keys: replica lists, a free-form extra body merged key by key,
// max_model_len auto, the context truncation mode; bad values name the key and what is allowed.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../src/config/index.ts";

const dir = mkdtempSync(join(tmpdir(), "rollgym-llm-keys-"));

describe("engine config keys", () => {
  it("merge extra_body from a file and overrides at every depth", () => {
    const file = join(dir, "llm.yaml");
    writeFileSync(
      file,
      "rollgym:\n  llm:\n    base_url: [http://a:8000/v1, http://b:8000/v1]\n    extra_body:\n      chat_template_kwargs: {enable_thinking: true}\n      priority: 1\n",
    );
    const { config } = loadConfig({
      files: [file],
      overrides: [
        "rollgym.llm.extra_body.chat_template_kwargs.enable_thinking=false",
        "rollgym.context.truncation=ragen",
      ],
    });
    expect(config.rollgym.llm.base_url).toEqual(["http://a:8000/v1", "http://b:8000/v1"]);
    expect(config.rollgym.llm.extra_body).toEqual({
      chat_template_kwargs: { enable_thinking: false },
      priority: 1,
    });
    expect(config.rollgym.context.truncation).toBe("ragen");
    expect(config.actor_rollout_ref.rollout.max_model_len).toBe("auto");
  });

  it("take a comma-separated replica list and a numeric max_model_len", () => {
    const { config } = loadConfig({
      overrides: [
        "rollgym.llm.base_url=http://a:1/v1,http://b:2/v1",
        "actor_rollout_ref.rollout.max_model_len=1200",
      ],
    });
    expect(config.rollgym.llm.base_url).toEqual(["http://a:1/v1", "http://b:2/v1"]);
    expect(config.actor_rollout_ref.rollout.max_model_len).toBe(1200);
  });

  it.each([
    ["rollgym.llm.base_url=http://a:1/v1,ftp://b", /rollgym\.llm\.base_url.*http\(s\) URL/],
    ["actor_rollout_ref.rollout.max_model_len=huge", /max_model_len.*an integer >= 1, or auto/],
    ["rollgym.llm.extra_body=3", /rollgym\.llm\.extra_body.*a mapping/],
    ["rollgym.llm.dialect=sglang", /rollgym\.llm\.dialect.*one of auto, vllm, llamacpp/],
    ["rollgym.context.truncation=oldest", /rollgym\.context\.truncation.*one of turns, ragen/],
    ["rollgym.llm.presence_penalty=3", /presence_penalty.*>= -2 and <= 2/],
    ["rollgym.llm.retry_budget_s=0", /retry_budget_s.*> 0/],
    ["rollgym.llm.count_tokens=exact", /rollgym\.llm\.count_tokens.*one of engine, usage/],
    ["rollgym.llm.request_seeds=sometimes", /rollgym\.llm\.request_seeds/],
    ["rollgym.llm.pause_clear_cache=maybe", /rollgym\.llm\.pause_clear_cache.*true or false/],
  ])("refuse %s naming the key and what is allowed", (override, message) => {
    expect(() => loadConfig({ overrides: [override] })).toThrow(ConfigError);
    expect(() => loadConfig({ overrides: [override] })).toThrow(message);
  });
});
