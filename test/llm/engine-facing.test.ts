// Engine-facing defects of the chat policy (issue 18), each against the mock vLLM engine or a
// bare capture server: a forced dialect the routes contradict, extra_body keys that would undo
// the fitted request, rendering fields /tokenize must see, per-request seeds, a gateway without
// /tokenize, and a context limit that shrinks while a server runs.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ChatPolicy } from "../../src/llm/openai-chat.ts";
import { type MockEngine, startMockEngine } from "../../src/mock-engine/server.ts";

describe("a forced dialect the engine's routes contradict", () => {
  let engine: MockEngine;
  beforeAll(async () => {
    engine = await startMockEngine({ model: "mock" });
  });
  afterAll(async () => {
    await engine?.close();
  });

  it("warns at preflight when dialect=llamacpp meets an engine whose /props answers 404, naming the fix", async () => {
    const forced = new ChatPolicy({ baseURL: engine.url, model: "mock", dialect: "llamacpp" });
    const info = await forced.preflight();
    await forced.close();
    expect(info.warnings).toHaveLength(1);
    expect(info.warnings[0]).toMatch(/rollgym\.llm\.dialect=llamacpp, but http:.*\/props answered HTTP 404/);
    expect(info.warnings[0]).toMatch(/repetition penalty/);
    expect(info.warnings[0]).toMatch(/set rollgym\.llm\.dialect=auto \(or vllm\)/);
    const detected = new ChatPolicy({ baseURL: engine.url, model: "mock" });
    expect((await detected.preflight()).warnings).toEqual([]);
    await detected.close();
  });
});
