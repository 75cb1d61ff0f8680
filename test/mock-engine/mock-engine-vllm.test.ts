// The mock engine's stock-vLLM behaviours: generation-config defaults, the reasoning parsers,
// aborts and /pause, the flat error shape, validation parity, outages and restarts, /tokenize.
// Engines listen on port 0 and are driven with fetch; no assertion depends on time.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MockEngineUsageError, mockEngineUsage, parseMockEngineArgs } from "../../src/mock-engine/cli.ts";
import { splitReasoning } from "../../src/mock-engine/reasoning.ts";
import { type MockEngine, type MockEngineOptions, startMockEngine } from "../../src/mock-engine/server.ts";
import { decode, IM_END_ID, THINK_END_ID } from "../../src/mock-engine/tokenizer.ts";

const MODEL = "Qwen/Qwen2.5-0.5B-Instruct";
// biome-ignore lint/suspicious/noExplicitAny: response bodies are read field by field in assertions
type Json = Record<string, any>;

const MESSAGES = [
  {
    role: "system",
    content: "You're a helpful assistant.\nYour available actions are:\nUp, Down, Left, Right\n",
  },
  { role: "user", content: "State: #P_#\nYou have 2 actions left. Always output: <think> ... </think>" },
  { role: "assistant", content: "<think>" },
];

/** RAGEN's request: the assistant prefill "<think>" continued, every sampling field sent. */
function chat(extra: Json = {}): Json {
  return {
    model: MODEL,
    messages: MESSAGES,
    continue_final_message: true,
    add_generation_prompt: false,
    max_completion_tokens: 200,
    temperature: 1,
    top_p: 1,
    top_k: 0,
    min_p: 0,
    repetition_penalty: 1,
    presence_penalty: 0,
    frequency_penalty: 0,
    ...extra,
  };
}

function omit(body: Json, ...keys: string[]): Json {
  const out = { ...body };
  for (const k of keys) delete out[k];
  return out;
}

function root(engine: MockEngine): string {
  return engine.url.slice(0, -"/v1".length);
}

async function post(engine: MockEngine, path: string, body: unknown) {
  const res = await fetch(`${root(engine)}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, json: (await res.json()) as Json };
}

async function withEngine<T>(options: MockEngineOptions, body: (e: MockEngine) => Promise<T>): Promise<T> {
  const engine = await startMockEngine({ model: MODEL, ...options });
  try {
    return await body(engine);
  } finally {
    await engine.close();
  }
}

async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((r) => setTimeout(r, 2));
}

function metric(text: string, name: string, label = ""): number {
  const line = text.split("\n").find((l) => l.startsWith(`${name}{${label}`));
  return Number(line?.split(" ").at(-1));
}

// --- 1. generation-config defaults -----------------------------------------------------------

describe("generation-config defaults (--generation-config)", () => {
  let engine: MockEngine;
  beforeAll(async () => {
    engine = await startMockEngine({
      model: MODEL,
      generationConfig: { repetition_penalty: 1.05, temperature: 0.7, top_p: 0.8, top_k: 20 },
    });
  });
  afterAll(() => engine.close());

  it("leaves a request that sends every field alone, and reports one that omits them", async () => {
    const full = await post(engine, "/v1/chat/completions", chat());
    expect(full.status).toBe(200);
    expect(full.headers.get("x-mock-defaults-applied")).toBeNull();
    expect(engine.stats().defaultsApplied).toBe(0);

    const control = await post(
      engine,
      "/v1/chat/completions",
      omit(chat(), "temperature", "top_p", "top_k", "repetition_penalty"),
    );
    expect(control.status).toBe(200);
    expect(control.headers.get("x-mock-defaults-applied")).toBe("temperature,top_p,top_k,repetition_penalty");
    // An explicit null is None in the request model: the default fills it too.
    const nulled = await post(engine, "/v1/completions", {
      prompt: "Hi",
      max_tokens: 4,
      repetition_penalty: null,
    });
    expect(nulled.headers.get("x-mock-defaults-applied")).toBe("temperature,top_p,top_k,repetition_penalty");
    // min_p is not in this config: leaving it out takes the built-in 0.0, which is no server default.
    const noMinP = await post(engine, "/v1/chat/completions", omit(chat(), "min_p"));
    expect(noMinP.headers.get("x-mock-defaults-applied")).toBeNull();

    const stats = engine.stats();
    expect(stats.defaultsApplied).toBe(2);
    expect(stats.defaultsAppliedByField).toMatchObject({
      temperature: 2,
      top_p: 2,
      top_k: 2,
      repetition_penalty: 2,
      min_p: 0,
      presence_penalty: 0,
    });
    const text = await (await fetch(`${root(engine)}/metrics`)).text();
    expect(metric(text, "mock_engine:generation_config_defaults_requests_total")).toBe(2);
    expect(metric(text, "mock_engine:generation_config_defaults_total", 'field="repetition_penalty"')).toBe(
      2,
    );
    expect(metric(text, "mock_engine:generation_config_defaults_total", 'field="min_p"')).toBe(0);
  });

  it("validates the filled-in values, and fills penalties and max_new_tokens when configured", async () => {
    await withEngine({ generationConfig: { top_p: 0 } }, async (e) => {
      const bad = await post(e, "/v1/chat/completions", omit(chat(), "top_p"));
      expect(bad.status).toBe(400);
      expect(bad.json.error.message).toBe("top_p must be in (0, 1], got 0.0. (parameter=top_p, value=0.0)");
    });
    await withEngine({ generationConfig: { presence_penalty: 0.5, max_new_tokens: 3 } }, async (e) => {
      const res = await post(
        e,
        "/v1/chat/completions",
        omit(chat(), "presence_penalty", "max_completion_tokens"),
      );
      expect(res.headers.get("x-mock-defaults-applied")).toBe("presence_penalty,max_tokens");
      expect(res.json.choices[0].finish_reason).toBe("length");
      expect(res.json.usage.completion_tokens).toBe(3);
    });
  });
});

// --- 2. reasoning parsers --------------------------------------------------------------------

describe("reasoning split (--reasoning-parser)", () => {
  const on = {};
  const off = { enable_thinking: false };
  it("splits text exactly like vLLM's qwen3 and deepseek_r1 parsers", () => {
    const cases: [
      string,
      [string | null, string | null],
      [string | null, string | null],
      [string | null, string | null],
    ][] = [
      // text, qwen3 (thinking on), qwen3 enable_thinking=false, deepseek_r1
      ["R</think>C", ["R", "C"], ["R", "C"], ["R", "C"]],
      ["R</think>", ["R", null], ["R", null], ["R", null]],
      ["</think>C", ["", "C"], ["", "C"], ["", "C"]],
      ["R", ["R", null], [null, "R"], ["R", null]],
      ["", ["", null], [null, ""], ["", null]],
      ["X<think>R</think>C", ["R", "C"], ["R", "C"], ["R", "C"]],
      ["R</think>C</think>D", ["R", "C</think>D"], ["R", "C</think>D"], ["R", "C</think>D"]],
      ["A<tool_call>B", ["A", "<tool_call>B"], [null, "A<tool_call>B"], ["A<tool_call>B", null]],
      ["<tool_call>B", [null, "<tool_call>B"], [null, "<tool_call>B"], ["<tool_call>B", null]],
    ];
    for (const [text, qwen, qwenOff, r1] of cases) {
      const pair = (s: { reasoning: string | null; content: string | null }) => [s.reasoning, s.content];
      expect(pair(splitReasoning("qwen3", text, on, true)), `qwen3 ${text}`).toEqual(qwen);
      expect(pair(splitReasoning("qwen3", text, off, true)), `qwen3 off ${text}`).toEqual(qwenOff);
      expect(pair(splitReasoning("deepseek_r1", text, off, true)), `r1 ${text}`).toEqual(r1);
      // include_reasoning: false drops only the reasoning.
      expect(splitReasoning("qwen3", text, on, false)).toEqual({ reasoning: null, content: qwen[1] });
    }
    // enable_thinking is read as a Python truth value: null and 0 switch thinking off too.
    expect(splitReasoning("qwen3", "R", { enable_thinking: null }, true)).toEqual({
      reasoning: null,
      content: "R",
    });
    expect(splitReasoning("qwen3", "R", { enable_thinking: "yes" }, true)).toEqual({
      reasoning: "R",
      content: null,
    });
  });

  it("puts the continued think block in message.reasoning and the rest in content", async () => {
    const body = chat({ seed: 9, return_token_ids: true });
    const plain = await withEngine({}, (e) => post(e, "/v1/chat/completions", body));
    await withEngine({ reasoningParser: "qwen3" }, async (e) => {
      const res = await post(e, "/v1/chat/completions", body);
      const raw = plain.json.choices[0].message.content as string;
      const message = res.json.choices[0].message;
      expect(message.reasoning + "</think>" + message.content).toBe(raw);
      expect(message.content).toMatch(/^<answer>.*<\/answer>$/);
      expect(res.json.choices[0].token_ids).toContain(THINK_END_ID);

      // Cut before </think>: all reasoning, content null (a truncated thought).
      const short = await post(e, "/v1/chat/completions", { ...body, max_completion_tokens: 2 });
      expect(short.json.choices[0].message.content).toBeNull();
      expect(short.json.choices[0].message.reasoning).toBe(
        decode(short.json.choices[0].token_ids, { skipSpecialTokens: true }),
      );
      // ... unless thinking is switched off, when it is all content.
      const off = await post(e, "/v1/chat/completions", {
        ...body,
        max_completion_tokens: 2,
        chat_template_kwargs: { enable_thinking: false },
      });
      expect(off.json.choices[0].message).toMatchObject({
        reasoning: null,
        content: short.json.choices[0].message.reasoning,
      });

      const hidden = await post(e, "/v1/chat/completions", { ...body, include_reasoning: false });
      expect(hidden.json.choices[0].message).toMatchObject({ reasoning: null, content: message.content });
    });
  });
});

// --- 3. aborts and /pause --------------------------------------------------------------------

describe("aborts (abortRate) and /pause, /resume, /is_paused", () => {
  it("answers an aborted request 200 with a prefix of its text and consistent usage", async () => {
    const body = chat({ seed: 4, return_token_ids: true, logprobs: true });
    const full = await withEngine({}, (e) => post(e, "/v1/chat/completions", body));
    const fullIds = full.json.choices[0].token_ids as number[];
    await withEngine({ abortRate: 1 }, async (e) => {
      const res = await post(e, "/v1/chat/completions", body);
      expect(res.status).toBe(200);
      expect(res.headers.get("x-mock-fault")).toBe("abort");
      const choice = res.json.choices[0];
      expect(choice.finish_reason).toBe("abort");
      expect(choice.stop_reason).toBeNull();
      const ids = choice.token_ids as number[];
      expect(ids.length).toBeLessThan(fullIds.length);
      expect(fullIds.slice(0, ids.length)).toEqual(ids);
      expect(full.json.choices[0].message.content.startsWith(choice.message.content)).toBe(true);
      expect(choice.logprobs.content).toHaveLength(ids.length);
      expect(res.json.usage.completion_tokens).toBe(ids.length);
      expect(e.stats()).toMatchObject({ injectedAborts: 1, completed: 1, finishReasons: { abort: 1 } });
    });
  });

  it("draws aborts per request index, reproducibly for a seed", async () => {
    const run = (): Promise<string[]> =>
      withEngine({ seed: 7, abortRate: 0.5 }, async (e) => {
        const out: string[] = [];
        for (let i = 0; i < 40; i++) {
          const res = await post(e, "/v1/completions", { prompt: "Hello there", max_tokens: 8, seed: 1 });
          out.push(`${res.json.choices[0].finish_reason}:${res.json.usage.completion_tokens}`);
        }
        return out;
      });
    const first = await run();
    expect(await run()).toEqual(first);
    const aborts = first.filter((o) => o.startsWith("abort")).length;
    expect(aborts).toBeGreaterThan(5);
    expect(aborts).toBeLessThan(35);
  });

  it("ends an aborted stream with a finish_reason abort chunk", async () => {
    await withEngine({ abortRate: 1, seed: 2 }, async (e) => {
      let text = "";
      for (let seed = 0; seed < 10 && !text.includes('"finish_reason":"abort"'); seed++) {
        const res = await fetch(`${e.url}/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify(chat({ seed, stream: true, stream_options: { include_usage: true } })),
        });
        text = await res.text();
      }
      const events = text
        .split("\n\n")
        .filter((l) => l.startsWith("data: {"))
        .map((l) => JSON.parse(l.slice(6)));
      const last = events.filter((ev) => ev.choices.length > 0).at(-1);
      expect(last.choices[0]).toMatchObject({ finish_reason: "abort", delta: { content: "" } });
      const tokens = events.filter((ev) => ev.choices[0]?.delta?.content).length;
      expect(events.at(-1).usage.completion_tokens).toBe(tokens);
      expect(text.endsWith("data: [DONE]\n\n")).toBe(true);
    });
  });

  it("aborts in-flight requests on /pause?mode=abort and holds new ones until /resume", async () => {
    await withEngine({ tpotMs: 60_000 }, async (e) => {
      const inflight = post(e, "/v1/chat/completions", chat({ seed: 1, return_token_ids: true }));
      await until(() => e.stats().running === 1);
      const paused = await post(e, "/pause?mode=abort", {});
      expect(paused).toMatchObject({ status: 200, json: { status: "paused" } });
      const aborted = await inflight;
      expect(aborted.status).toBe(200);
      expect(aborted.json.choices[0].finish_reason).toBe("abort");
      expect(aborted.json.choices[0].token_ids).toHaveLength(1); // the first token was out
      expect(aborted.json.usage.completion_tokens).toBe(1);
      expect(((await (await fetch(`${root(e)}/is_paused`)).json()) as Json).is_paused).toBe(true);

      // While paused a new request is accepted but waits (vLLM queues it in the scheduler).
      const waiting = post(e, "/v1/completions", { prompt: "Hello", max_tokens: 1 });
      await until(() => e.stats().waiting === 1);
      expect(e.stats().completed).toBe(1);
      expect(await post(e, "/resume", {})).toMatchObject({ status: 200, json: { status: "resumed" } });
      const done = await waiting;
      expect(done.json.choices[0].finish_reason).toBe("length");
      expect(e.stats()).toMatchObject({ pauseAborts: 1, completed: 2, waiting: 0, running: 0 });
      expect(((await (await fetch(`${root(e)}/is_paused`)).json()) as Json).is_paused).toBe(false);
    });
  });

  it("aborts queued requests too, with nothing generated", async () => {
    await withEngine({ ttftMs: 60_000, maxConcurrency: 1 }, async (e) => {
      const first = post(e, "/v1/completions", { prompt: "a", max_tokens: 5 });
      const queued = fetch(`${e.url}/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          prompt: "b",
          max_tokens: 5,
          stream: true,
          stream_options: { include_usage: true },
        }),
      });
      await until(() => e.stats().running === 1 && e.stats().waiting === 1);
      await e.pause("abort");
      expect((await first).json.choices[0]).toMatchObject({ finish_reason: "abort", text: "" });
      const text = await (await queued).text();
      // Nothing was generated: no finish chunk (vLLM skips it), only usage and [DONE].
      expect(text).not.toContain('"finish_reason"');
      expect(text).toContain('"completion_tokens":0');
      expect(text.endsWith("data: [DONE]\n\n")).toBe(true);
      expect(e.stats()).toMatchObject({ pauseAborts: 2, running: 0, waiting: 0 });
      e.resume();
    });
  });

  it("lets in-flight requests finish on mode=wait and freezes them on mode=keep", async () => {
    await withEngine({ tpotMs: 2 }, async (e) => {
      const inflight = post(e, "/v1/chat/completions", chat({ seed: 3 }));
      await until(() => e.stats().running === 1);
      await post(e, "/pause?mode=wait", {});
      // /pause answers once the running request is done, and it finished normally.
      expect(e.stats().completed).toBe(1);
      expect((await inflight).json.choices[0].finish_reason).toBe("stop");
      e.resume();
    });
    await withEngine({ tpotMs: 2 }, async (e) => {
      const reference = await post(e, "/v1/chat/completions", chat({ seed: 3 }));
      const inflight = post(e, "/v1/chat/completions", chat({ seed: 3 }));
      await until(() => e.stats().running === 1);
      await post(e, "/pause?mode=keep", {});
      expect(e.isPaused()).toBe(true);
      await new Promise((r) => setTimeout(r, 50));
      expect(e.stats()).toMatchObject({ completed: 1, running: 1 }); // frozen, not aborted
      e.resume();
      const res = await inflight;
      expect(res.json.choices[0].finish_reason).toBe("stop");
      expect(res.json.choices[0].message.content).toBe(reference.json.choices[0].message.content);
    });
  });

  it("clear_cache (default true, as vLLM's): a keep pause that clears the cache makes its frozen requests prefill again after resume; one that keeps it does not", async () => {
    await withEngine({ tpotMs: 5 }, async (e) => {
      const frozen = (query: string) => async () => {
        const inflight = post(e, "/v1/chat/completions", chat({ seed: 4 }));
        await until(() => e.stats().running === 1);
        expect(await post(e, `/pause?mode=keep${query}`, {})).toMatchObject({ status: 200 });
        e.resume();
        return (await inflight).json.usage.prompt_tokens as number;
      };
      const prompt = await frozen("&clear_cache=false")();
      expect(e.stats()).toMatchObject({ pauseCacheClears: 0, reprefills: 0, reprefillTokens: 0 });
      await frozen("&clear_cache=true")();
      expect(e.stats()).toMatchObject({ pauseCacheClears: 1, reprefills: 1 });
      // The prompt and what was generated before the pause are computed again.
      expect(e.stats().reprefillTokens).toBeGreaterThanOrEqual(prompt);
      await frozen("")();
      expect(e.stats()).toMatchObject({ pauseCacheClears: 2, reprefills: 2 });
      // A pause of another mode clears the caches but freezes nothing.
      await post(e, "/pause?mode=abort&clear_cache=1", {});
      e.resume();
      expect(e.stats()).toMatchObject({ pauseCacheClears: 3, reprefills: 2 });
      const bad = await post(e, "/pause?mode=keep&clear_cache=maybe", {});
      expect(bad.status).toBe(400);
      expect(bad.json.error.message).toContain("'loc': ('query', 'clear_cache')");
      expect(e.isPaused()).toBe(false);
    });
  });

  it("refuses /pause and fails /resume when told to, with vLLM's 500 bodies; counts requests that arrive while paused", async () => {
    await withEngine({}, async (e) => {
      e.refusePause("CUDA out of memory");
      expect(await post(e, "/pause?mode=keep", {})).toEqual({
        status: 500,
        headers: expect.anything(),
        json: { error: "Failed to pause generation: CUDA out of memory" },
      });
      expect(e.isPaused()).toBe(false);
      e.refusePause(null);
      await post(e, "/pause?mode=keep", {});
      e.failResume(2);
      for (let i = 0; i < 2; i++)
        expect((await post(e, "/resume", {})).json).toEqual({
          error: "Failed to resume generation: injected failure",
        });
      expect(e.isPaused()).toBe(true);
      const queued = post(e, "/v1/completions", { prompt: "Hello", max_tokens: 1 });
      await until(() => e.stats().waiting === 1);
      expect(e.stats().arrivedWhilePaused).toBe(1);
      expect(await post(e, "/resume", {})).toMatchObject({ status: 200, json: { status: "resumed" } });
      expect((await queued).status).toBe(200);
      expect(() => e.failResume(-1)).toThrow("failResume takes a non-negative integer, got -1");
    });
  });

  it("refuses an unknown pause mode like FastAPI's query validation", async () => {
    await withEngine({}, async (e) => {
      const res = await post(e, "/pause?mode=later", {});
      expect(res.status).toBe(400);
      expect(res.json.error.type).toBe("Bad Request");
      expect(res.json.error.message).toContain("'loc': ('query', 'mode')");
      expect(e.isPaused()).toBe(false);
    });
  });
});

// --- 4. flat error shape ---------------------------------------------------------------------

describe("errorShape: flat (vLLM < 0.10.1)", () => {
  it("answers errors without the error wrapper and with param null", async () => {
    await withEngine({ errorShape: "flat" }, async (e) => {
      const res = await post(e, "/v1/chat/completions", chat({ model: "nope" }));
      expect(res.status).toBe(404);
      expect(res.json).toEqual({
        object: "error",
        message: "The model `nope` does not exist.",
        type: "NotFoundError",
        param: null,
        code: 404,
      });
      const bad = await post(e, "/v1/completions", { prompt: "x", temperature: -1 });
      expect(bad.json).toMatchObject({ object: "error", type: "BadRequestError", param: null, code: 400 });
    });
  });
});

// --- 5. validation parity --------------------------------------------------------------------

describe("validation parity with vLLM's request models and SamplingParams", () => {
  let engine: MockEngine;
  beforeAll(async () => {
    engine = await startMockEngine({ model: MODEL });
  });
  afterAll(() => engine.close());
  const err = async (path: string, body: unknown): Promise<Json> => {
    const res = await post(engine, path, body);
    return { status: res.status, ...res.json.error };
  };

  it("refuses JSON null for fields that are not Optional", async () => {
    for (const [field, type] of [
      ["ignore_eos", "bool_type"],
      ["skip_special_tokens", "bool_type"],
      ["include_stop_str_in_output", "bool_type"],
      ["min_tokens", "int_type"],
      ["request_id", "string_type"],
      ["include_reasoning", "bool_type"],
      ["add_generation_prompt", "bool_type"],
    ]) {
      const e = await err("/v1/chat/completions", chat({ [field]: null }));
      expect(e.status, field).toBe(400);
      expect(e.message, field).toContain(`{'type': '${type}', 'loc': ('body', '${field}')`);
    }
    // n is Optional in chat (None means 1) but not in completions.
    expect((await post(engine, "/v1/chat/completions", chat({ n: null }))).json.choices).toHaveLength(1);
    expect((await err("/v1/completions", { prompt: "x", n: null })).message).toContain("'int_type'");
    // Completions: max_tokens null passes validation, then trips an assert after generating.
    const nullMax = await err("/v1/completions", { prompt: "x", max_tokens: null });
    expect(nullMax).toMatchObject({ status: 500, type: "InternalServerError", message: "" });
  });

  it("refuses empty stop strings, out-of-int64 seeds and out-of-range penalties", async () => {
    for (const stop of [[""], "", ["a", ""]])
      expect(await err("/v1/completions", { prompt: "x", stop })).toMatchObject({
        status: 400,
        type: "BadRequestError",
        message: "stop cannot contain an empty string.",
        param: null,
      });
    const big = await err("/v1/completions", '{"prompt": "x", "seed": 9223372036854775808}');
    expect(big.status).toBe(400);
    expect(big.message).toContain("'input': 9223372036854775808");
    expect(big.message).toContain("Input should be less than or equal to 9223372036854775807");
    const small = await err("/v1/completions", '{"prompt": "x", "seed": -9223372036854775809}');
    expect(small.message).toContain("greater_than_equal");
    const edge = await post(
      engine,
      "/v1/completions",
      '{"prompt": "x", "max_tokens": 2, "seed": 9223372036854775807}',
    );
    expect(edge.status).toBe(200);

    const cases: [Json, string][] = [
      [{ presence_penalty: 2.5 }, "presence_penalty must be in [-2, 2], got 2.5."],
      [{ frequency_penalty: -3 }, "frequency_penalty must be in [-2, 2], got -3.0."],
      [{ repetition_penalty: 0 }, "repetition_penalty must be greater than zero, got 0.0."],
      [{ top_k: -2 }, "top_k must be 0 (disable), or at least 1, got -2."],
      [{ min_p: 1.5 }, "min_p must be in [0, 1], got 1.5."],
      [
        { temperature: -1 },
        "temperature must be non-negative, got -1.0. (parameter=temperature, value=-1.0)",
      ],
      [{ n: 2, temperature: 0 }, "n must be 1 when using greedy sampling, got 2."],
      [{ bad_words: [""] }, "bad_words cannot contain an empty string. Got bad_words=['']"],
    ];
    for (const [extra, message] of cases)
      expect(await err("/v1/chat/completions", chat(extra)), message).toMatchObject({ status: 400, message });
  });

  it("coerces like pydantic's lax mode: numeric strings, 0/1 and yes/no", async () => {
    const ok = await post(engine, "/v1/chat/completions", {
      ...chat({
        temperature: "0.5",
        top_k: "3",
        max_completion_tokens: "4",
        logprobs: "true",
        top_logprobs: 1,
      }),
      ignore_eos: "yes",
      return_token_ids: 1,
      repetition_penalty: " 1.0 ",
      seed: "12",
    });
    expect(ok.status).toBe(200);
    expect(ok.json.choices[0].token_ids).toHaveLength(4);
    expect(ok.json.choices[0].logprobs.content[0].top_logprobs).toHaveLength(1);
    const bad = await err("/v1/chat/completions", chat({ temperature: "warm", ignore_eos: 2, top_k: "1.5" }));
    expect(bad.message).toMatch(/^3 validation errors:/);
    expect(bad.message).toContain("'float_parsing'");
    expect(bad.message).toContain("'bool_parsing'");
    expect(bad.message).toContain("'int_parsing'");
    // A model validator compares the raw value: a Python TypeError, which vLLM answers with 400.
    expect(await err("/v1/completions", { prompt: "x", prompt_logprobs: "2" })).toMatchObject({
      status: 400,
      type: "BadRequestError",
      message: "'<' not supported between instances of 'str' and 'int'",
    });
  });

  it("answers n choices; with a seed, choice i is what seed + i gives alone", async () => {
    const three = await post(
      engine,
      "/v1/chat/completions",
      chat({ n: 3, seed: 20, return_token_ids: true }),
    );
    expect(three.json.choices.map((c: Json) => c.index)).toEqual([0, 1, 2]);
    const ids = three.json.choices.map((c: Json) => c.token_ids as number[]);
    expect(three.json.usage.completion_tokens).toBe(ids.flat().length);
    for (let i = 0; i < 3; i++) {
      const alone = await post(
        engine,
        "/v1/chat/completions",
        chat({ seed: 20 + i, return_token_ids: true }),
      );
      expect(alone.json.choices[0].token_ids).toEqual(ids[i]);
    }
    const res = await fetch(`${engine.url}/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ prompt: "Hi", max_tokens: 3, n: 2, stream: true, ignore_eos: true }),
    });
    const events = (await res.text())
      .split("\n\n")
      .filter((l) => l.startsWith("data: {"))
      .map((l) => JSON.parse(l.slice(6)));
    const finished = events
      .filter((ev) => ev.choices[0].finish_reason === "length")
      .map((ev) => ev.choices[0].index);
    expect(finished.sort()).toEqual([0, 1]);
  });
});

// --- 6. outages, Retry-After and restarts ----------------------------------------------------

describe("outages, Retry-After and restarts", () => {
  it("resets connections or answers 503 while an outage lasts", async () => {
    await withEngine({}, async (e) => {
      e.setOutage("reset");
      await expect(fetch(`${root(e)}/health`)).rejects.toThrow();
      e.setOutage("503", { retryAfterS: 7 });
      const down = await fetch(`${root(e)}/v1/models`);
      expect(down.status).toBe(503);
      expect(down.headers.get("retry-after")).toBe("7");
      expect(((await down.json()) as Json).error.code).toBe(503);
      e.setOutage(null);
      expect((await fetch(`${root(e)}/health`)).status).toBe(200);
      expect(e.stats()).toMatchObject({ outageUnavailable: 1 });
      expect(e.stats().outageResets).toBeGreaterThan(0);
    });
  });

  it("puts retryAfterS on injected 429 and 503 answers, or none", async () => {
    await withEngine({ errorRate: 1, unavailableShare: 1, retryAfterS: 3 }, async (e) => {
      const res = await post(e, "/v1/completions", { prompt: "x", max_tokens: 2 });
      expect(res.status).toBe(503);
      expect(res.headers.get("retry-after")).toBe("3");
    });
    await withEngine({ rateLimitRate: 1, retryAfterS: null }, async (e) => {
      const res = await post(e, "/v1/completions", { prompt: "x", max_tokens: 2 });
      expect(res.status).toBe(429);
      expect(res.headers.get("retry-after")).toBeNull();
    });
  });

  it("restarts on the same port after close()", async () => {
    const first = await startMockEngine({ model: MODEL, seed: 1 });
    const port = first.port;
    expect((await post(first, "/v1/completions", { prompt: "x", max_tokens: 2 })).status).toBe(200);
    await first.close();
    await expect(fetch(`${root(first)}/health`)).rejects.toThrow();
    const second = await startMockEngine({ model: MODEL, seed: 1, port });
    try {
      expect(second.url).toBe(first.url);
      expect((await post(second, "/v1/completions", { prompt: "x", max_tokens: 2 })).status).toBe(200);
    } finally {
      await second.close();
    }
  });
});

// --- 7. /v1/models and /tokenize -------------------------------------------------------------

describe("/v1/models and /tokenize with messages", () => {
  it("reports max_model_len and tokenizes a prefilled conversation as the chat route renders it", async () => {
    await withEngine({ maxModelLen: 2048 }, async (e) => {
      const models = (await (await fetch(`${e.url}/models`)).json()) as Json;
      expect(models.data[0]).toMatchObject({ id: MODEL, max_model_len: 2048 });
      const tok = await post(e, "/tokenize", {
        model: MODEL,
        messages: MESSAGES,
        continue_final_message: true,
        add_generation_prompt: false,
      });
      expect(Object.keys(tok.json).sort()).toEqual(["count", "max_model_len", "token_strs", "tokens"]);
      expect(tok.json).toMatchObject({
        count: tok.json.tokens.length,
        max_model_len: 2048,
        token_strs: null,
      });
      const gen = await post(e, "/v1/chat/completions", chat({ return_token_ids: true }));
      expect(gen.json.prompt_token_ids).toEqual(tok.json.tokens);
      expect(decode(tok.json.tokens).endsWith("<|im_start|>assistant\n<think>")).toBe(true);
      expect(gen.json.choices[0].token_ids.at(-1)).toBe(IM_END_ID);
    });
  });
});

// --- CLI -------------------------------------------------------------------------------------

describe("mock-engine flags for the vLLM behaviours", () => {
  it("parses and documents them", () => {
    expect(
      parseMockEngineArgs([
        "--generation-config",
        '{"repetition_penalty":1.05,"top_k":20}',
        "--reasoning-parser",
        "qwen3",
        "--abort-rate",
        "0.1",
        "--error-shape",
        "flat",
        "--retry-after-s",
        "none",
      ]),
    ).toEqual({
      port: 8000,
      generationConfig: { repetition_penalty: 1.05, top_k: 20 },
      reasoningParser: "qwen3",
      abortRate: 0.1,
      errorShape: "flat",
      retryAfterS: null,
    });
    const usage = mockEngineUsage();
    for (const flag of [
      "--generation-config",
      "--reasoning-parser",
      "--abort-rate",
      "--error-shape",
      "--retry-after-s",
    ])
      expect(usage).toContain(flag);
    for (const argv of [
      ["--generation-config", "{bad"],
      ["--generation-config", '{"typical_p":0.9}'],
      ["--reasoning-parser", "granite"],
      ["--error-shape", "xml"],
      ["--abort-rate", "0.6", "--drop-rate", "0.6"],
    ])
      expect(() => parseMockEngineArgs(argv), argv.join(" ")).toThrow(MockEngineUsageError);
  });
});
