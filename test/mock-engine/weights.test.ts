// The mock engine's side of weight updates (issue #22), over HTTP: vLLM's version label routes,
// a simulated trainer's load applied between decode steps and recorded per token, cache_salt
// isolating prefix-cache hits, and an engine without the pause routes.
import { afterEach, describe, expect, it } from "vitest";
import {
  type GenerationRecord,
  type MockEngine,
  type MockEngineOptions,
  startMockEngine,
} from "../../src/mock-engine/server.ts";

const engines: MockEngine[] = [];
afterEach(async () => {
  await Promise.all(engines.splice(0).map((e) => e.close()));
});

async function start(options: MockEngineOptions = {}): Promise<{ engine: MockEngine; root: string }> {
  const engine = await startMockEngine(options);
  engines.push(engine);
  return { engine, root: engine.url.replace(/\/v1$/, "") };
}

async function call(
  method: string,
  url: string,
  body?: unknown,
): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(url, {
    method,
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

const PROMPT = Array.from({ length: 40 }, (_, i) => 10 + (i % 50));

function complete(root: string, extra: Record<string, unknown> = {}) {
  return call("POST", `${root}/v1/completions`, { prompt: PROMPT, max_tokens: 8, seed: 1, ...extra });
}

describe("weight version label", () => {
  it("is 'default' at start, set by /update_weight_version, and refused without a string new_version", async () => {
    const { root } = await start();
    expect(await call("GET", `${root}/weight_info`)).toEqual({
      status: 200,
      json: { weight_version: "default" },
    });
    expect(await call("POST", `${root}/update_weight_version`, { new_version: "step-42" })).toEqual({
      status: 200,
      json: { success: true, new_version: "step-42" },
    });
    for (const bad of [{}, { weight_version: "x" }, { new_version: ["a"] }]) {
      const answer = await call("POST", `${root}/update_weight_version`, bad);
      expect(answer.status).toBe(400);
      expect(JSON.stringify(answer.json)).toContain("new_version");
    }
    expect((await call("GET", `${root}/weight_info`)).json).toEqual({ weight_version: "step-42" });
  });

  it("is absent with the pause routes (as on llama.cpp): 404", async () => {
    const { root } = await start({ pauseRoutes: false });
    for (const [method, path] of [
      ["POST", "/pause?mode=keep"],
      ["POST", "/resume"],
      ["GET", "/is_paused"],
      ["GET", "/weight_info"],
    ])
      expect((await call(method, `${root}${path}`)).status).toBe(404);
    expect((await complete(root)).status).toBe(200);
  });
});

describe("loaded weights", () => {
  it("a load while a request is frozen by a keep pause applies to the tokens it makes after the resume", async () => {
    const { engine, root } = await start({ tpotMs: 20 });
    const answer = call("POST", `${root}/v1/completions`, {
      prompt: PROMPT,
      max_tokens: 30,
      min_tokens: 30,
      seed: 1,
      ignore_eos: true,
      return_token_ids: true,
    });
    while (engine.stats().decodedTokens < 5) await new Promise((r) => setTimeout(r, 5));
    await call("POST", `${root}/pause?mode=keep`);
    expect((await call("POST", `${root}/mock/load_weights`, { version: "step-1" })).json).toEqual({
      loaded: "step-1",
      paused: true,
    });
    await call("POST", `${root}/resume`);
    const { json } = await answer;
    const [record] = (await call("GET", `${root}/mock/generations`)).json.generations as GenerationRecord[];
    expect(record.choices[0]).toEqual((json as { choices: { token_ids: number[] }[] }).choices[0].token_ids);
    expect(record.versions).toHaveLength(30);
    const firstNew = record.versions.indexOf("step-1");
    expect(firstNew).toBeGreaterThanOrEqual(5);
    expect(record.versions).toEqual(record.versions.map((_, i) => (i < firstNew ? "default" : "step-1")));
    // The label is not the weights: /weight_info still says what /update_weight_version set.
    expect(engine.weights()).toEqual({ loaded: "step-1", label: "default" });
    expect((await call("POST", `${root}/mock/load_weights`, {})).status).toBe(400);
  });
});

describe("cache_salt", () => {
  it("isolates prefix-cache hits per salt", async () => {
    const { engine, root } = await start();
    await complete(root, { cache_salt: "a" });
    await complete(root, { cache_salt: "a" });
    await complete(root, { cache_salt: "b" });
    await complete(root);
    const { prefixCacheBySalt, prefixCacheHits, prefixCacheQueries } = engine.stats();
    // 40 prompt tokens: two full blocks of 16 can hit.
    expect(prefixCacheBySalt).toEqual({
      a: { queries: 80, hits: 32 },
      b: { queries: 40, hits: 0 },
      "": { queries: 40, hits: 0 },
    });
    expect({ prefixCacheHits, prefixCacheQueries }).toEqual({ prefixCacheHits: 32, prefixCacheQueries: 160 });
    const metrics = await (await fetch(`${root}/metrics`)).text();
    expect(metrics).toMatch(/vllm:prefix_cache_hits_total\{[^}]*\} 32/);
    expect((await complete(root, { cache_salt: "" })).status).toBe(400);
  });
});
