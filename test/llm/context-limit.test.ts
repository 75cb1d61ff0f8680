// The live context limit: the smaller of the configured and the smallest reported length, and
// which engine refusals say a prompt did not fit (vLLM's wordings over its versions, llama.cpp's).
import { describe, expect, it } from "vitest";
import { ContextLimit, isLengthRefusal } from "../../src/llm/context-limit.ts";
import { EngineError } from "../../src/llm/http.ts";

describe("ContextLimit", () => {
  it("takes the smallest replica's length, capped by the configured one, and follows a replica that changed", () => {
    const limit = new ContextLimit("auto");
    expect(limit.value).toBeNull();
    limit.note("a", 4096);
    limit.note("b", 8192);
    limit.note("c", null);
    expect(limit.value).toBe(4096);
    limit.note("a", 16384);
    expect(limit.value).toBe(8192);
    const capped = new ContextLimit(2000);
    expect(capped.value).toBe(2000);
    capped.note("a", 1024);
    expect(capped.value).toBe(1024);
  });
});

describe("isLengthRefusal", () => {
  it.each([
    "HTTP 400: This model's maximum context length is 1024 tokens. However, you requested 700 output tokens and your prompt contains 473 input tokens",
    "HTTP 400: 'max_tokens' or 'max_completion_tokens' is too large: 900. This model's maximum context length is 1024 tokens",
    "HTTP 400: max_tokens=2000 cannot be greater than max_model_len=1024. Please request fewer output tokens.",
    "HTTP 400: The decoder prompt (length 1024) plus the number of requested output tokens (at least 1) is longer than the maximum model length of 1024.",
    "HTTP 400: You passed 473 input tokens and requested 700 output tokens. However, the model's context length is only 1024 tokens",
    "HTTP 400: the request exceeds the available context size, try increasing it",
  ])("knows %s", (message) => {
    expect(isLengthRefusal(new EngineError(message, 400))).toBe(true);
  });

  it("leaves other refusals alone", () => {
    expect(isLengthRefusal(new EngineError("HTTP 400: temperature must be non-negative", 400))).toBe(false);
    expect(isLengthRefusal(new EngineError("HTTP 500: maximum context length", 500))).toBe(false);
    expect(isLengthRefusal(new Error("maximum context length"))).toBe(false);
  });
});
