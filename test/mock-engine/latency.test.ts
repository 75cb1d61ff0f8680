// The mock engine's latency model: the length distribution, padded answers that stay valid
// RAGEN answers, and the virtual-time scheduler's slowdown rule, checked on its own clock
// (timers off, time moved by hand), never on wall time.
import { describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import type { ChatMessage } from "../../src/llm/chat.ts";
import { type AnswerMode, answerPrompt } from "../../src/mock-engine/answer.ts";
import { renderChat } from "../../src/mock-engine/chat-template.ts";
import { MockEngineUsageError, parseMockEngineArgs } from "../../src/mock-engine/cli.ts";
import { fitAnswerLength } from "../../src/mock-engine/generate.ts";
import {
  describeLatencyModel,
  drawResponseTokens,
  LATENCY_PRESETS,
  type LognormalLengths,
  perTokenMs,
} from "../../src/mock-engine/latency.ts";
import { loadQwen3Tokenizer } from "../../src/mock-engine/qwen3-tokenizer.ts";
import { Rng } from "../../src/mock-engine/rng.ts";
import { DecodeScheduler } from "../../src/mock-engine/scheduler.ts";
import { type MockEngine, type MockEngineOptions, startMockEngine } from "../../src/mock-engine/server.ts";
import { TOY_TOKENIZER } from "../../src/mock-engine/tokenizer.ts";
import { mapActions, parseResponse } from "../../src/rollout/parse.ts";
import { firstTurnMessages } from "../../src/rollout/prompt.ts";

const BENCH: LognormalLengths = { kind: "lognormal", median: 60, p99: 400 };

function quantile(sorted: readonly number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

// --- the length distribution ------------------------------------------------------------------

describe("response lengths", () => {
  it("are lognormal with the configured median and p99 (seeded, 40,000 draws)", () => {
    const rng = new Rng(7);
    const draws = Array.from({ length: 40_000 }, () => drawResponseTokens(BENCH, rng)).sort((a, b) => a - b);
    expect(Math.abs(quantile(draws, 0.5) - 60) / 60).toBeLessThan(0.03);
    expect(Math.abs(quantile(draws, 0.99) - 400) / 400).toBeLessThan(0.08);
    expect(draws[0]).toBeGreaterThanOrEqual(1);
    // A narrower model really is narrower.
    const narrow = Array.from({ length: 10_000 }, () =>
      drawResponseTokens({ kind: "lognormal", median: 60, p99: 120 }, rng),
    ).sort((a, b) => a - b);
    expect(Math.abs(quantile(narrow, 0.99) - 120) / 120).toBeLessThan(0.08);
  });
});

// --- padded answers -----------------------------------------------------------------------------

const registry = createRegistry();

/** The four ways a RAGEN prompt can end, for one tag and seed, and the env's action names. */
function prompts(
  tagName: string,
  seed: number,
): { actionNames: readonly string[]; endings: { mode: AnswerMode; prompt: string }[] } {
  const tag = registry.tag(tagName);
  const env = tag.make();
  const observation = env.reset(seed); // the Bandit names its arms at reset
  const render = (messages: ChatMessage[], prefill: string | null): string =>
    renderChat(prefill === null ? messages : [...messages, { role: "assistant", content: prefill }], {
      addGenerationPrompt: prefill === null,
      continueFinalMessage: prefill !== null,
    });
  const think = firstTurnMessages(tag, observation, { think: true });
  const noThink = firstTurnMessages(tag, observation, { think: false });
  return {
    actionNames: env.actionNames,
    endings: [
      { mode: "think", prompt: render(think, null) },
      { mode: "continue-think", prompt: render(think, "<think>") },
      { mode: "answer", prompt: render(noThink, null) },
      { mode: "continue-answer", prompt: render(noThink, "<answer>") },
    ],
  };
}

/** What RAGEN sees: the prefill the prompt ended in, then the generated text. */
function ragenActions(mode: AnswerMode, text: string, actionNames: readonly string[]) {
  const prefix = mode === "continue-think" ? "<think>" : mode === "continue-answer" ? "<answer>" : "";
  const parsed = parseResponse(prefix + text, { think: mode === "think" || mode === "continue-think" });
  return { matched: parsed.matched, ...mapActions(parsed.parsed, actionNames) };
}

describe("answers padded to a drawn length", () => {
  it("reach the length exactly and stay valid RAGEN answers, in every prompt mode and at every length", async () => {
    const qwen3 = await loadQwen3Tokenizer();
    for (const tokenizer of [TOY_TOKENIZER, qwen3]) {
      for (const tagName of ["SimpleSokoban", "CoordFrozenLake", "Bandit"]) {
        const { actionNames, endings } = prompts(tagName, 3);
        for (const { mode, prompt } of endings) {
          const natural = answerPrompt(prompt, new Rng(1), {});
          expect(natural.mode).toBe(mode);
          const naturalTokens = tokenizer.encode(natural.text).length + 1;
          for (let target = 1; target <= 600; target += target < 80 ? 1 : 37) {
            const padded = fitAnswerLength(natural, tokenizer, target);
            expect(tokenizer.encode(padded.text).length + 1).toBe(Math.max(target, naturalTokens));
            const seen = ragenActions(mode, padded.text, actionNames);
            expect(seen.matched).toBe(true);
            expect(seen.formatPenalty).toBe(false);
            expect(seen.names).toEqual(natural.actions);
          }
        }
      }
    }
  });
});

// --- the scheduler, on its own clock -----------------------------------------------------------

/** A scheduler whose time moves only when the test says so. */
function manual(timing = { tpotMs: 10, batchKnee: 64, slowdownPerRequest: 0.01 }) {
  let now = 0;
  const scheduler = new DecodeScheduler(timing, { now: () => now, timers: false });
  return {
    scheduler,
    at(ms: number): void {
      now = ms;
      scheduler.advance();
    },
  };
}

describe("the decode scheduler", () => {
  it("computes the per-token time as tpot × (1 + slowdown × (running − knee))", () => {
    const model = LATENCY_PRESETS.default;
    expect(perTokenMs(model, 1)).toBe(10);
    expect(perTokenMs(model, 64)).toBe(10);
    expect(perTokenMs(model, 164)).toBeCloseTo(20, 10);
    expect(perTokenMs(model, 10_240)).toBeCloseTo(10 * (1 + 0.01 * 10_176), 9);
    expect(perTokenMs(LATENCY_PRESETS.slow10x, 1_024)).toBeCloseTo(100 * 10.6, 9);
    const { scheduler } = manual();
    for (let i = 0; i < 164; i++) scheduler.add({ prefillMs: 50, steps: 10 });
    expect(scheduler.running).toBe(164);
    expect(scheduler.perTokenMs).toBeCloseTo(20, 10);
  });

  it("puts out the first token after the prefill, then one per per-token time", () => {
    const { scheduler, at } = manual();
    const job = scheduler.add({ prefillMs: 50, steps: 10 });
    at(49.9);
    expect(job.produced).toBe(0);
    at(50);
    expect(job.produced).toBe(1);
    at(50 + 4.5 * 10);
    expect(job.produced).toBe(5);
    // The count of decoded tokens includes the half-made sixth token.
    expect(scheduler.decodedTokens()).toBeCloseTo(5.5, 9);
    at(139.9);
    expect(job.done).toBe(false);
    at(140);
    expect(job.done).toBe(true);
    expect(scheduler.decodedTokens()).toBeCloseTo(10, 9);
    expect(scheduler.running).toBe(0);
  });

  it("slows every request while the batch is past the knee, and speeds the rest up as jobs leave", () => {
    // Knee 1, +100% per request beyond it: two running jobs decode at 20 ms per token.
    const { scheduler, at } = manual({ tpotMs: 10, batchKnee: 1, slowdownPerRequest: 1 });
    const done: string[] = [];
    const a = scheduler.add({ prefillMs: 0, steps: 2, onDone: () => done.push("a") });
    const b = scheduler.add({ prefillMs: 0, steps: 4, onDone: () => done.push("b") });
    expect(scheduler.perTokenMs).toBe(20);
    at(19.9);
    expect([a.produced, b.produced]).toEqual([1, 1]);
    at(20); // a's second token, at 20 ms per token; b has made 2 as well
    expect(done).toEqual(["a"]);
    expect(b.produced).toBe(2);
    expect(scheduler.perTokenMs).toBe(10);
    at(39.9); // alone, b needs 2 more tokens at 10 ms
    expect(b.done).toBe(false);
    at(40);
    expect(done).toEqual(["a", "b"]);
    expect(scheduler.decodedTokens()).toBeCloseTo(6, 9);
  });

  it("finishes 10,240 jobs in order of length with the per-token time set by the batch", () => {
    const { scheduler, at } = manual();
    const finished: number[] = [];
    for (let i = 0; i < 10_240; i++) {
      const steps = 1 + (i % 100);
      scheduler.add({ prefillMs: 50, steps, onDone: () => finished.push(steps) });
    }
    expect(scheduler.perTokenMs).toBeCloseTo(10 * (1 + 0.01 * (10_240 - 64)), 9);
    at(50);
    expect(finished.filter((s) => s === 1)).toHaveLength(103); // the one-token jobs end at prefill
    // 10,137 left: a token takes 10 × (1 + 0.01 × 10,073) = 1,017.3 ms.
    expect(scheduler.perTokenMs).toBeCloseTo(1017.3, 9);
    at(50 + 1017.2);
    expect(finished).toHaveLength(103);
    at(50 + 1017.4);
    expect(finished).toHaveLength(103 + 103); // the two-token jobs
    at(10 * 60 * 1000);
    expect(finished).toHaveLength(10_240);
    expect([...finished].sort((x, y) => x - y)).toEqual(finished);
  });

  it("stands still while frozen, and counts what a removed job made", () => {
    const { scheduler, at } = manual();
    const job = scheduler.add({ prefillMs: 0, steps: 100 });
    at(30);
    expect(job.produced).toBe(4);
    scheduler.freeze();
    at(1_000);
    expect(job.produced).toBe(4);
    scheduler.thaw();
    at(1_020);
    expect(job.produced).toBe(6);
    expect(scheduler.remove(job)).toBe(6);
    at(5_000);
    expect(scheduler.decodedTokens()).toBeCloseTo(6, 9);
    expect(scheduler.running).toBe(0);
  });

  it("wakes streaming jobs as their tokens come out", () => {
    const { scheduler, at } = manual();
    const seen: number[] = [];
    const job = scheduler.add({ prefillMs: 5, steps: 4, onProgress: () => seen.push(job.produced) });
    at(5);
    at(25);
    expect(job.produced).toBe(3);
    at(100);
    expect(seen.at(-1)).toBe(4);
    expect(job.done).toBe(true);
  });
});

// --- the engine with a length model -----------------------------------------------------------

async function withEngine<T>(
  options: MockEngineOptions,
  run: (engine: MockEngine) => Promise<T>,
): Promise<T> {
  const engine = await startMockEngine(options);
  try {
    return await run(engine);
  } finally {
    await engine.close();
  }
}

// biome-ignore lint/suspicious/noExplicitAny: a vLLM answer, read field by field
type Json = Record<string, any>;

async function chat(engine: MockEngine, body: Record<string, unknown>): Promise<Json> {
  const res = await fetch(`${engine.url}/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "mock", ...body }),
  });
  return (await res.json()) as Json;
}

describe("the engine with a response-length model", () => {
  const tag = registry.tag("SimpleSokoban");
  const env = tag.make();
  const messages = [
    ...firstTurnMessages(tag, env.reset(5), { think: true }),
    { role: "assistant", content: "<think>" },
  ];
  const request = { messages, continue_final_message: true, add_generation_prompt: false };

  it("answers at the drawn lengths, capped at max_tokens with finish_reason length, in valid RAGEN", async () => {
    await withEngine({ model: "mock", responseTokens: BENCH, seed: 3 }, async (engine) => {
      const lengths: number[] = [];
      let capped = 0;
      for (let i = 0; i < 400; i++) {
        const body = await chat(engine, { ...request, seed: i, max_tokens: 150 });
        const choice = body.choices[0];
        const tokens = body.usage.completion_tokens;
        lengths.push(tokens);
        if (choice.finish_reason === "length") {
          expect(tokens).toBe(150);
          capped++;
          continue;
        }
        expect(choice.finish_reason).toBe("stop");
        const seen = ragenActions("continue-think", choice.message.content, env.actionNames);
        expect(seen).toMatchObject({ matched: true, formatPenalty: false });
      }
      lengths.sort((a, b) => a - b);
      // The median of 400 lognormal draws: within a few standard errors of 60.
      expect(Math.abs(quantile(lengths, 0.5) - 60)).toBeLessThan(10);
      // P(draw > 150) ≈ 0.13 for this model.
      expect(capped).toBeGreaterThan(25);
      expect(capped).toBeLessThan(90);
      const stats = engine.stats();
      expect(stats.finishReasons.length).toBe(capped);
      expect(stats.decodedTokens).toBeCloseTo(stats.generationTokens, 6);
    });
  });

  it("keeps the natural answers when the length model is off, and the same seed gives the same answer", async () => {
    const natural = await withEngine({ model: "mock" }, (e) => chat(e, { ...request, seed: 11 }));
    const preset = await withEngine({ model: "mock", latencyModel: "none" }, (e) =>
      chat(e, { ...request, seed: 11 }),
    );
    expect(preset.choices[0].message.content).toBe(natural.choices[0].message.content);
    const long = await withEngine(
      { model: "mock", responseTokens: { kind: "lognormal", median: 300, p99: 300 } },
      (e) => chat(e, { ...request, seed: 11 }),
    );
    expect(long.usage.completion_tokens).toBe(300);
    // The padding goes into the thought; the actions are the natural answer's.
    const answerOf = (text: string): string => text.slice(text.indexOf("<answer>"));
    expect(answerOf(long.choices[0].message.content)).toBe(answerOf(natural.choices[0].message.content));
  });

  it("streams the same tokens it would answer at once, through the scheduler", async () => {
    await withEngine(
      { model: "mock", responseTokens: BENCH, ttftMs: 3, tpotMs: 0.2, slowdownPerRequest: 0.5, batchKnee: 1 },
      async (engine) => {
        const whole = await chat(engine, { ...request, seed: 4 });
        const res = await fetch(`${engine.url}/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ ...request, seed: 4, stream: true }),
        });
        const text = await res.text();
        const content = text
          .split("\n\n")
          .filter((l) => l.startsWith("data: {"))
          .map((l) => JSON.parse(l.slice(6)).choices[0]?.delta?.content ?? "")
          .join("");
        expect(content).toBe(whole.choices[0].message.content);
        expect(text.endsWith("data: [DONE]\n\n")).toBe(true);
      },
    );
  });

  it("reports decoded tokens, the per-token time and its CPU in stats(), /metrics and /mock/stats", async () => {
    await withEngine(
      { model: "mock", latencyModel: "default", ttftMs: 0, tpotMs: 60_000 },
      async (engine) => {
        expect(engine.latency).toEqual({ ...LATENCY_PRESETS.default, ttftMs: 0, tpotMs: 60_000 });
        const pending = chat(engine, { ...request, seed: 1, max_tokens: 3 }).catch(() => null);
        while (engine.stats().running === 0) await new Promise((r) => setTimeout(r, 2));
        const stats = engine.stats();
        // The first token is out at once; the second is 60 s away.
        expect(stats.decodedTokens).toBeGreaterThanOrEqual(1);
        expect(stats.decodedTokens).toBeLessThan(1.5);
        expect(stats.perTokenMs).toBe(60_000);
        expect(stats.cpuSeconds).toBeGreaterThan(0);
        const root = engine.url.slice(0, -3);
        const metrics = await (await fetch(`${root}/metrics`)).text();
        for (const name of [
          "mock_engine:decoded_tokens_total",
          "mock_engine:per_token_seconds",
          "mock_engine:cpu_seconds_total",
        ])
          expect(metrics).toMatch(new RegExp(`^${name}\\{engine="0",model_name="mock"\\} [0-9.e+-]+$`, "m"));
        const json = (await (await fetch(`${root}/mock/stats`)).json()) as Record<string, number>;
        expect(json.running).toBe(1);
        expect(json.perTokenMs).toBe(60_000);
        expect(json.cpuSeconds).toBeGreaterThanOrEqual(stats.cpuSeconds);
        await engine.pause("abort");
        expect((await pending)?.choices[0].finish_reason).toBe("abort");
        engine.resume();
      },
    );
  });

  it("describes its latency model in one line", () => {
    expect(describeLatencyModel(LATENCY_PRESETS.default)).toBe(
      "TTFT 50 ms + 10 ms/token, +1% per-token time per running request beyond 64; " +
        "response tokens lognormal median 60, p99 400, capped at max_tokens",
    );
    expect(describeLatencyModel(LATENCY_PRESETS.none)).toBe("no latency; policy-length answers");
  });
});

describe("latency flags", () => {
  it("parse into options, and name the flag and what it allows on bad input", () => {
    expect(
      parseMockEngineArgs([
        "--latency-model",
        "slow10x",
        "--batch-knee",
        "32",
        "--slowdown-per-request=0.02",
        "--response-tokens",
        "lognormal:50:300",
        "--tpot-ms",
        "5",
      ]),
    ).toEqual({
      port: 8000,
      latencyModel: "slow10x",
      batchKnee: 32,
      slowdownPerRequest: 0.02,
      responseTokens: { kind: "lognormal", median: 50, p99: 300 },
      tpotMs: 5,
    });
    expect(parseMockEngineArgs(["--response-tokens", "natural"]).responseTokens).toBeNull();
    const cases: [string[], RegExp][] = [
      [["--latency-model", "fast"], /--latency-model: "fast" is not one of none, default, slow10x/],
      [
        ["--response-tokens", "uniform:1:2"],
        /--response-tokens: "uniform:1:2" is not "lognormal:MEDIAN:P99"/,
      ],
      [
        ["--response-tokens", "lognormal:60:30"],
        /--response-tokens: responseTokens.p99 must be a number ≥ the median/,
      ],
      [["--batch-knee", "-1"], /--batch-knee: "-1" is not an integer from 0/],
      [["--slowdown-per-request", "x"], /--slowdown-per-request: "x" is not a number/],
    ];
    for (const [argv, message] of cases) {
      expect(() => parseMockEngineArgs(argv)).toThrow(MockEngineUsageError);
      expect(() => parseMockEngineArgs(argv)).toThrow(message);
    }
  });

  it("refuses a bad latency option in the library with the field's name", async () => {
    await expect(startMockEngine({ latencyModel: "fast" as "none" })).rejects.toThrow(
      /latencyModel must be one of/,
    );
    await expect(startMockEngine({ batchKnee: 1.5 })).rejects.toThrow(/batchKnee must be an integer/);
    await expect(
      startMockEngine({ responseTokens: { kind: "lognormal", median: 0, p99: 4 } }),
    ).rejects.toThrow(/responseTokens.median/);
  });
});
