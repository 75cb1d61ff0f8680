// The mock vLLM engine: its tokenizer and policy on their own, then the HTTP server through the
// real `openai` client (chat) and plain fetch (everything else). No assertion depends on time.

import { spawn } from "node:child_process";
import { once } from "node:events";
import { createServer } from "node:http";
import { join } from "node:path";
import { createInterface } from "node:readline";
import fc from "fast-check";
import OpenAI, { APIConnectionError, BadRequestError, NotFoundError } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import type { ResolvedTag } from "../../envs/registry.ts";
import { scrapeEngines } from "../../src/bench/prometheus.ts";
import { exitStatus } from "../../src/errors/boundary.ts";
import { answerMode, answerPrompt, readActionSpace } from "../../src/mock-engine/answer.ts";
import { renderChat } from "../../src/mock-engine/chat-template.ts";
import { MockEngineUsageError, parseMockEngineArgs } from "../../src/mock-engine/cli.ts";
import { Rng } from "../../src/mock-engine/rng.ts";
import {
  HTTP_SERVER_OPTIONS,
  type MockEngine,
  type MockEngineOptions,
  startMockEngine,
} from "../../src/mock-engine/server.ts";
import {
  decode,
  encode,
  IM_END_ID,
  pretokenize,
  tokenStr,
  VOCAB_SIZE,
} from "../../src/mock-engine/tokenizer.ts";
import { mapActions, parseResponse } from "../../src/rollout/parse.ts";
import { ROOT } from "../helpers/cli.ts";

// --- RAGEN prompts, built here the way RAGEN's context manager writes them -------------------

const registry = createRegistry();

function systemPrompt(tag: ResolvedTag): string {
  const vocab = tag.type.vocabulary(tag.config);
  let instruction = tag.spec.env_instruction;
  if (vocab.gridVocab) {
    const pairs = Object.entries(vocab.gridVocab).map(([k, v]) => `${k}: ${v}`);
    instruction += `\nThe meaning of each symbol in the state is:\n${pairs.join(", ")}`;
  }
  if (vocab.actionNames) {
    instruction +=
      `\nYour available actions are:\n${vocab.actionNames.join(", ")}` +
      `\nYou can make up to ${tag.spec.max_actions_per_traj} actions, separated by the action separator " || "\n`;
  }
  return `You're a helpful assistant. ${instruction}`;
}

function userTurn(state: string, actionsLeft: number, think = true): string {
  const format = think
    ? "<think> [Your thoughts] </think> <answer> [your answer] </answer>"
    : "<answer> [your answer] </answer>";
  return (
    `\nTurn 1:\nState:\n${state}\nYou have ${actionsLeft} actions left. Always output: ${format} ` +
    "with no extra text. Strictly follow this format. Max response length: 100 words (tokens).\n"
  );
}

interface Episode {
  tag: ResolvedTag;
  actionNames: readonly string[];
  messages: { role: "system" | "user" | "assistant"; content: string }[];
}

function firstTurn(tagName: string, seed: number, think = true): Episode {
  const tag = registry.tag(tagName);
  const env = tag.make();
  const state = env.reset(seed);
  return {
    tag,
    actionNames: env.actionNames,
    messages: [
      { role: "system", content: systemPrompt(tag) },
      { role: "user", content: userTurn(state, tag.spec.max_actions_per_traj, think) },
    ],
  };
}

/** RAGEN's prefill: the assistant turn starts with "<think>", and the model continues it. */
function withPrefill(episode: Episode, prefill = "<think>"): Episode["messages"] {
  return [...episode.messages, { role: "assistant", content: prefill }];
}

// --- tokenizer, template, policy -------------------------------------------------------------

describe("toy tokenizer", () => {
  it("round-trips text, including specials, whitespace runs and multi-byte characters", () => {
    const samples = [
      "",
      "Hello wörld 🎉 <|im_start|>user\n\n  x<|im_end|>\n",
      "<think>I will move Up.</think><answer>Up || Left</answer>",
      "######\n#O####\n#X_P##\nCoordinates: \n",
      "a <think> b <|endoftext|> c",
      "\t\r\n\u00a0\u2028 x",
    ];
    for (const s of samples) expect(decode(encode(s))).toBe(s);
  });

  it("round-trips arbitrary strings (property)", () => {
    fc.assert(
      fc.property(fc.string({ unit: "binary", maxLength: 200 }), (s) => decode(encode(s)) === s),
      { numRuns: 500 },
    );
  });

  it("pre-tokenizes exactly like its reference regex", () => {
    const reference =
      /<\|endoftext\|>|<\|im_start\|>|<\|im_end\|>|<\/?think>|<\/?answer>| ?[A-Za-z]+| ?[0-9]{1,2}|\n\n| ?\|\|| ?[^\sA-Za-z0-9<|]+|[<|]|\s/gu;
    const tricky = fc.constantFrom(
      "<think>",
      "</answer>",
      "<|im_end|>",
      "<|im",
      " ",
      "\n",
      "|",
      "<",
      "a",
      "Up",
      "7",
      "é",
      "🎉",
      "#",
      "\u00a0",
      "\t",
    );
    const text = fc.oneof(
      fc.string({ unit: "binary", maxLength: 60 }),
      fc.string({ unit: tricky, maxLength: 30 }),
    );
    fc.assert(
      fc.property(text, (s) => {
        expect(pretokenize(s)).toEqual(Array.from(s.matchAll(reference), (m) => m[0]));
      }),
      { numRuns: 1000 },
    );
  });

  it("encodes RAGEN's tags as single tokens and common words as one token each", () => {
    expect(encode("<think>")).toHaveLength(1);
    expect(encode("</answer>")).toHaveLength(1);
    expect(encode("<|im_end|>")).toEqual([IM_END_ID]);
    expect(encode(" Up || Left")).toHaveLength(3);
    expect(decode([IM_END_ID], { skipSpecialTokens: true })).toBe("");
    expect(decode(encode("<answer>Up</answer><|im_end|>"), { skipSpecialTokens: true })).toBe(
      "<answer>Up</answer>",
    );
    expect(tokenStr(encode(" Up")[0])).toBe("ĠUp");
    expect(() => decode([VOCAB_SIZE])).toThrow(/out of vocabulary/);
  });
});

describe("chat template", () => {
  const messages = [
    { role: "system", content: "S" },
    { role: "user", content: "U" },
  ];
  it("renders ChatML with the generation prompt", () => {
    expect(renderChat(messages, { addGenerationPrompt: true, continueFinalMessage: false })).toBe(
      "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n",
    );
  });
  it("leaves the last message open with continue_final_message", () => {
    const prefilled = [...messages, { role: "assistant", content: "<think>" }];
    expect(renderChat(prefilled, { addGenerationPrompt: false, continueFinalMessage: true })).toBe(
      "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n<think>",
    );
  });
  it("pre-fills an empty think block when enable_thinking is false (Qwen3)", () => {
    const text = renderChat(messages, {
      addGenerationPrompt: true,
      continueFinalMessage: false,
      kwargs: { enable_thinking: false },
    });
    expect(text.endsWith("<|im_start|>assistant\n<think>\n\n</think>\n\n")).toBe(true);
  });
});

describe("policy", () => {
  const render = (m: Episode["messages"], prefill: boolean): string =>
    renderChat(m, { addGenerationPrompt: !prefill, continueFinalMessage: prefill });

  it("reads the action list, the bandit arms and the actions-left budget", () => {
    const sokoban = firstTurn("CoordSokoban", 10000);
    expect(readActionSpace(render(sokoban.messages, false))).toEqual({
      actions: ["Up", "Down", "Left", "Right"],
      source: "action-list",
      maxActions: 2,
    });
    const bandit = firstTurn("Bandit", 3);
    expect(readActionSpace(render(bandit.messages, false))).toEqual({
      actions: [...bandit.actionNames],
      source: "bandit",
      maxActions: 1,
    });
    expect(readActionSpace("no actions here").source).toBe("fallback");
  });

  it("answers every RAGEN tag in a format RAGEN parses into valid actions", () => {
    for (const tagName of registry.tagNames()) {
      for (let seed = 0; seed < 20; seed++) {
        const episode = firstTurn(tagName, seed);
        const answer = answerPrompt(render(withPrefill(episode), true), new Rng(seed), {});
        expect(answer.mode).toBe("continue-think");
        const parsed = parseResponse(`<think>${answer.text}`, { think: true });
        expect(parsed.matched).toBe(true);
        const mapped = mapActions(parsed.parsed, episode.actionNames);
        expect(mapped.formatPenalty).toBe(false);
        expect(mapped.names).toEqual(answer.actions);
        expect(answer.actions.length).toBeLessThanOrEqual(tagName.startsWith("Bandit") ? 1 : 2);
      }
    }
  });

  it("follows the no-think format and the answer-only prefill", () => {
    const episode = firstTurn("SimpleSokoban", 1, false);
    const full = answerPrompt(render(episode.messages, false), new Rng(1), { answerActions: 2 });
    expect(full.mode).toBe("answer");
    expect(full.text).toMatch(/^<answer>\w+ \|\| \w+<\/answer>$/);
    const cont = answerPrompt(render(withPrefill(episode, "<answer>"), true), new Rng(1), {
      answerActions: 1,
    });
    expect(cont.mode).toBe("continue-answer");
    expect(cont.text).toMatch(/^\w+<\/answer>$/);
    expect(answerMode("<|im_start|>assistant\n<think>\n\n</think>\n\n")).toBe("answer");
  });

  it("is malformed at the configured rate, and always so at rate 1", () => {
    const episode = firstTurn("SimpleSokoban", 5);
    const prompt = render(withPrefill(episode), true);
    for (let i = 0; i < 50; i++) {
      const answer = answerPrompt(prompt, new Rng(i), { formatErrorRate: 1 });
      const parsed = parseResponse(`<think>${answer.text}`, { think: true });
      // Each kind costs RAGEN's format penalty: no tag match, or an unknown action.
      expect(!parsed.matched || mapActions(parsed.parsed, episode.actionNames).formatPenalty).toBe(true);
    }
  });
});

// --- the HTTP server ---------------------------------------------------------------------------

const MODEL = "Qwen/Qwen2.5-0.5B-Instruct";

type VllmChatParams = OpenAI.Chat.ChatCompletionCreateParamsNonStreaming & {
  continue_final_message?: boolean;
  add_generation_prompt?: boolean;
  return_token_ids?: boolean;
  top_k?: number;
  min_p?: number;
  chat_template_kwargs?: Record<string, unknown>;
  skip_special_tokens?: boolean;
};

interface VllmChoiceExtras {
  token_ids: number[] | null;
  stop_reason: number | string | null;
}

function client(engine: MockEngine): OpenAI {
  return new OpenAI({ baseURL: engine.url, apiKey: "EMPTY", maxRetries: 0, timeout: 30_000 });
}

function root(engine: MockEngine): string {
  return engine.url.slice(0, -"/v1".length);
}

async function post(engine: MockEngine, path: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${root(engine)}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, json: (await res.json()) as Record<string, unknown> };
}

function errorOf(json: Record<string, unknown>): {
  message: string;
  type: string;
  param: string | null;
  code: number;
} {
  return json.error as { message: string; type: string; param: string | null; code: number };
}

function chatParams(episode: Episode, extra: Partial<VllmChatParams> = {}): VllmChatParams {
  return {
    model: MODEL,
    messages: withPrefill(episode),
    continue_final_message: true,
    add_generation_prompt: false,
    max_completion_tokens: 200,
    temperature: 1,
    top_p: 1,
    top_k: 0,
    min_p: 0,
    ...extra,
  };
}

async function withEngine<T>(
  options: MockEngineOptions,
  body: (engine: MockEngine) => Promise<T>,
): Promise<T> {
  const engine = await startMockEngine({ model: MODEL, ...options });
  try {
    return await body(engine);
  } finally {
    await engine.close();
  }
}

/** Run `count` jobs with at most `width` in flight. */
async function pool<T>(count: number, width: number, job: (i: number) => Promise<T>): Promise<T[]> {
  const results: T[] = new Array(count);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < count) {
      const i = next++;
      results[i] = await job(i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(width, count) }, worker));
  return results;
}

describe("mock engine over HTTP", () => {
  let engine: MockEngine;
  let openai: OpenAI;
  const sokoban = firstTurn("CoordSokoban", 10000);

  beforeAll(async () => {
    engine = await startMockEngine({ model: MODEL, maxModelLen: 4096 });
    openai = client(engine);
  });
  afterAll(async () => {
    await engine.close();
  });

  it("never times a request out with a 408, as vLLM's uvicorn does not (Node's defaults: 60 s, 300 s)", () => {
    const server = createServer(HTTP_SERVER_OPTIONS);
    expect([server.headersTimeout, server.requestTimeout]).toEqual([0, 0]);
  });

  it("answers a RAGEN chat turn (vLLM fields in the body) that parses into valid actions", async () => {
    const params = chatParams(sokoban, {
      seed: 11,
      return_token_ids: true,
      logprobs: true,
      top_logprobs: 2,
      chat_template_kwargs: { enable_thinking: true },
    });
    const res = await openai.chat.completions.create(params);
    expect(res.object).toBe("chat.completion");
    expect(res.model).toBe(MODEL);
    expect(res.id).toMatch(/^chatcmpl-/);
    const choice = res.choices[0];
    const extras = choice as unknown as VllmChoiceExtras;
    const content = choice.message.content ?? "";
    expect(content.startsWith("<think>")).toBe(false); // the prefill is not repeated
    const parsed = parseResponse(`<think>${content}`, { think: true });
    expect(parsed.matched).toBe(true);
    expect(mapActions(parsed.parsed, sokoban.actionNames).formatPenalty).toBe(false);
    expect((choice.message as unknown as { reasoning: unknown }).reasoning).toBeNull();
    expect(choice.finish_reason).toBe("stop");
    expect(extras.stop_reason).toBeNull();
    // token_ids end with EOS, which the text leaves out; logprobs align 1:1 with them.
    const ids = extras.token_ids ?? [];
    expect(ids.at(-1)).toBe(IM_END_ID);
    expect(decode(ids, { skipSpecialTokens: true })).toBe(content);
    expect(choice.logprobs?.content).toHaveLength(ids.length);
    for (const entry of choice.logprobs?.content ?? []) {
      expect(entry.top_logprobs).toHaveLength(2);
      expect(entry.top_logprobs[0].token).toBe(entry.token);
      expect(entry.logprob).toBeLessThanOrEqual(0);
    }
    const promptIds = (res as unknown as { prompt_token_ids: number[] }).prompt_token_ids;
    expect(res.usage).toMatchObject({ prompt_tokens: promptIds.length, completion_tokens: ids.length });
    expect(decode(promptIds).endsWith("<|im_start|>assistant\n<think>")).toBe(true);
  });

  it("gives the same text for the same request and seed", async () => {
    const texts = await Promise.all(
      [5, 5, 6, 7, 8, 9, 10, 11].map((seed) => openai.chat.completions.create(chatParams(sokoban, { seed }))),
    );
    const contents = texts.map((r) => r.choices[0].message.content);
    expect(contents[0]).toBe(contents[1]);
    expect(new Set(contents).size).toBeGreaterThan(2);
    const again = await openai.chat.completions.create(chatParams(sokoban, { seed: 5 }));
    expect(again.choices[0].message.content).toBe(contents[0]);
    // Greedy decoding needs no seed to repeat itself.
    const greedy = await Promise.all(
      [1, 2].map(() => openai.chat.completions.create(chatParams(sokoban, { temperature: 0 }))),
    );
    expect(greedy[0].choices[0].message.content).toBe(greedy[1].choices[0].message.content);
  });

  it("answers the Bandit prompt with one arm", async () => {
    const bandit = firstTurn("Bandit", 7);
    const res = await openai.chat.completions.create(chatParams(bandit, { seed: 1 }));
    const parsed = parseResponse(`<think>${res.choices[0].message.content}`, { think: true });
    expect(parsed.parsed).toHaveLength(1);
    expect(bandit.actionNames).toContain(parsed.parsed[0]);
  });

  it("honours X-Request-Id in the response id and header", async () => {
    const res = await post(engine, "/v1/chat/completions", chatParams(sokoban), {
      "X-Request-Id": "traj-7-turn-2",
    });
    expect(res.status).toBe(200);
    expect(res.json.id).toBe("chatcmpl-traj-7-turn-2");
    expect(res.headers.get("x-request-id")).toBe("traj-7-turn-2");
  });

  it("serves token-in/token-out completions with aligned logprobs", async () => {
    const prompt = encode(
      renderChat(withPrefill(sokoban), { addGenerationPrompt: false, continueFinalMessage: true }),
    );
    const res = await post(engine, "/v1/completions", {
      model: MODEL,
      prompt,
      max_tokens: 100,
      logprobs: 0,
      return_token_ids: true,
      seed: 3,
    });
    expect(res.status).toBe(200);
    expect(res.json.object).toBe("text_completion");
    const choice = (res.json.choices as Record<string, unknown>[])[0];
    const ids = choice.token_ids as number[];
    const logprobs = choice.logprobs as {
      tokens: string[];
      token_logprobs: number[];
      top_logprobs: object[];
    };
    expect(choice.prompt_token_ids).toEqual(prompt);
    expect(logprobs.token_logprobs).toHaveLength(ids.length);
    expect(logprobs.tokens.at(-1)).toBe("<|im_end|>");
    expect(logprobs.top_logprobs.every((t) => Object.keys(t).length === 1)).toBe(true);
    expect(parseResponse(`<think>${choice.text}`, { think: true }).matched).toBe(true);
  });

  it("stops on stop strings and on max_tokens like vLLM", async () => {
    const stopped = await post(engine, "/v1/chat/completions", {
      ...chatParams(sokoban),
      stop: ["</answer>"],
      return_token_ids: true,
    });
    const choice = (stopped.json.choices as Record<string, unknown>[])[0];
    expect(choice.finish_reason).toBe("stop");
    expect(choice.stop_reason).toBe("</answer>");
    const content = (choice.message as { content: string }).content;
    expect(content).toMatch(/<answer>[^<]*$/);
    // token_ids keep the token that completed the stop string; no EOS was generated.
    expect(decode(choice.token_ids as number[]).endsWith("</answer>")).toBe(true);

    const cut = await post(engine, "/v1/completions", { prompt: "Hello", max_tokens: 3 });
    const cutChoice = (cut.json.choices as Record<string, unknown>[])[0];
    expect(cutChoice.finish_reason).toBe("length");
    expect(cut.json.usage).toMatchObject({ completion_tokens: 3 });
  });

  it("answers with the think block pre-filled away when enable_thinking is false", async () => {
    const res = await openai.chat.completions.create({
      ...chatParams(sokoban),
      messages: sokoban.messages,
      continue_final_message: false,
      add_generation_prompt: true,
      chat_template_kwargs: { enable_thinking: false },
    } as VllmChatParams);
    expect(res.choices[0].message.content).toMatch(/^<answer>[^<]+<\/answer>$/);
  });

  it("refuses an unknown model with 404 NotFoundError", async () => {
    const err = await openai.chat.completions
      .create({ ...chatParams(sokoban), model: "nope" })
      .catch((e) => e);
    expect(err).toBeInstanceOf(NotFoundError);
    expect(err.status).toBe(404);
    expect(err.error).toEqual({
      message: "The model `nope` does not exist.",
      type: "NotFoundError",
      param: "model",
      code: 404,
    });
  });

  it("refuses bad JSON, missing or mistyped fields with pydantic-style 400s", async () => {
    const bad = await post(engine, "/v1/chat/completions", '{"model": ');
    expect(bad.status).toBe(400);
    expect(errorOf(bad.json)).toMatchObject({ type: "Bad Request", param: null, code: 400 });
    expect(errorOf(bad.json).message).toContain("json_invalid");

    const missing = await post(engine, "/v1/chat/completions", { model: MODEL });
    expect(missing.status).toBe(400);
    expect(errorOf(missing.json).message).toContain("'loc': ('body', 'messages'), 'msg': 'Field required'");

    const typed = await post(engine, "/v1/completions", {
      prompt: "x",
      max_tokens: "ten",
      temperature: "hot",
    });
    expect(typed.status).toBe(400);
    expect(errorOf(typed.json).message).toMatch(/^2 validation errors:/);

    const noPrompt = await post(engine, "/v1/completions", { model: MODEL });
    expect(errorOf(noPrompt.json).message).toContain(
      "Either prompt or prompt_embeds must be provided and non-empty.",
    );

    const form = await fetch(`${engine.url}/chat/completions`, { method: "POST", body: "a=b" });
    expect(form.status).toBe(400);
  });

  it("answers n=2 with two choices and refuses n=0 as SamplingParams does", async () => {
    const two = await openai.chat.completions.create({ ...chatParams(sokoban), n: 2 });
    expect(two.choices.map((c) => c.index)).toEqual([0, 1]);
    const err = await openai.chat.completions.create({ ...chatParams(sokoban), n: 0 }).catch((e) => e);
    expect(err).toBeInstanceOf(BadRequestError);
    expect(err.message).toContain("n must be at least 1, got 0.");
    expect(err.type).toBe("BadRequestError");
  });

  it("refuses continue_final_message together with add_generation_prompt", async () => {
    const both = await post(engine, "/v1/chat/completions", {
      ...chatParams(sokoban),
      add_generation_prompt: true,
    });
    expect(both.status).toBe(400);
    expect(errorOf(both.json).message).toContain(
      "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
    );
    // Left at its default (true), add_generation_prompt still clashes, later (in the template).
    const implicit = await post(engine, "/v1/chat/completions", {
      model: MODEL,
      messages: withPrefill(sokoban),
      continue_final_message: true,
    });
    expect(implicit.status).toBe(400);
    expect(errorOf(implicit.json).type).toBe("BadRequestError");
  });

  it("refuses context overflow and max_tokens beyond max_model_len", async () => {
    const promptLen = encode("x ".repeat(4000)).length;
    const over = await post(engine, "/v1/completions", {
      model: MODEL,
      prompt: "x ".repeat(4000),
      max_tokens: 200,
    });
    expect(over.status).toBe(400);
    expect(errorOf(over.json)).toEqual({
      message: `This model's maximum context length is 4096 tokens. However, you requested 200 output tokens and your prompt contains ${promptLen} input tokens, for a total of ${promptLen + 200} tokens. Please reduce the length of the input prompt or the number of requested output tokens. (parameter=input_tokens, value=${promptLen})`,
      type: "BadRequestError",
      param: "input_tokens",
      code: 400,
    });
    const err = await openai.chat.completions
      .create({ ...chatParams(sokoban), max_completion_tokens: 5000 })
      .catch((e) => e);
    expect(err).toBeInstanceOf(BadRequestError);
    // vLLM's f-string prints `{max_total_tokens=}` (renderers/params.py:213-220).
    expect(err.message).toContain(
      "max_completion_tokens=5000 cannot be greater than max_model_len=max_total_tokens=4096. Please request fewer output tokens. (parameter=max_completion_tokens, value=5000)",
    );
  });

  it("streams SSE chunks whose text adds up to the non-streamed answer", async () => {
    const params = chatParams(sokoban, { seed: 21, return_token_ids: true });
    const whole = await openai.chat.completions.create(params);
    const stream = await openai.chat.completions.create({
      ...params,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    const chunks: OpenAI.Chat.ChatCompletionChunk[] = [];
    for await (const chunk of stream) {
      chunks.push(chunk);
      text += chunk.choices[0]?.delta.content ?? "";
    }
    expect(text).toBe(whole.choices[0].message.content);
    expect(chunks[0].choices[0].delta.role).toBe("assistant");
    expect(chunks.at(-2)?.choices[0].finish_reason).toBe("stop");
    expect(chunks.at(-1)?.choices).toEqual([]);
    expect(chunks.at(-1)?.usage).toEqual(whole.usage);
    const streamedIds = chunks.flatMap(
      (c) => (c.choices[0] as unknown as VllmChoiceExtras | undefined)?.token_ids ?? [],
    );
    expect(streamedIds).toEqual((whole.choices[0] as unknown as VllmChoiceExtras).token_ids);
  });

  it("ends a raw completions stream with data: [DONE]", async () => {
    const res = await fetch(`${engine.url}/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, prompt: "Hi <answer>", max_tokens: 20, stream: true, seed: 1 }),
    });
    expect(res.headers.get("content-type")).toBe("text/event-stream; charset=utf-8");
    const events = (await res.text()).split("\n\n").filter((e) => e !== "");
    expect(events.every((e) => e.startsWith("data: "))).toBe(true);
    expect(events.at(-1)).toBe("data: [DONE]");
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e.slice(6)) as { choices: { text: string }[] });
    expect(chunks.map((c) => c.choices[0].text).join("")).toMatch(/^\w+( \|\| \w+)?<\/answer>$/);
  });

  it("tokenizes both body styles and detokenizes back", async () => {
    const text = "Hello wörld <think>Up || Left</think> 🎉\n\n";
    const tok = await post(engine, "/tokenize", { model: MODEL, prompt: text, return_token_strs: true });
    expect(tok.status).toBe(200);
    expect(tok.json.count).toBe((tok.json.tokens as number[]).length);
    expect(tok.json.max_model_len).toBe(4096);
    expect((tok.json.token_strs as string[]).length).toBe(tok.json.count);
    const detok = await post(engine, "/detokenize", { model: MODEL, tokens: tok.json.tokens });
    expect(detok.json).toEqual({ prompt: text });

    const messages = withPrefill(sokoban);
    const chatTok = await post(engine, "/tokenize", {
      model: MODEL,
      messages,
      add_generation_prompt: false,
      continue_final_message: true,
    });
    expect(chatTok.json.token_strs).toBeNull();
    const completion = await post(engine, "/v1/chat/completions", {
      ...chatParams(sokoban),
      return_token_ids: true,
    });
    expect(chatTok.json.tokens).toEqual(completion.json.prompt_token_ids);
    const bad = await post(engine, "/detokenize", { tokens: [VOCAB_SIZE + 5] });
    expect(bad.status).toBe(400);
  });

  it("serves /v1/models, /health, /version and unknown routes like vLLM", async () => {
    const models = (await (await fetch(`${engine.url}/models`)).json()) as {
      data: Record<string, unknown>[];
    };
    expect(models.data[0]).toMatchObject({
      id: MODEL,
      object: "model",
      owned_by: "vllm",
      max_model_len: 4096,
    });
    const listed = await openai.models.list();
    expect(listed.data.map((m) => m.id)).toEqual([MODEL]);
    const health = await fetch(`${root(engine)}/health`);
    expect(health.status).toBe(200);
    expect(await health.text()).toBe("");
    expect(await (await fetch(`${root(engine)}/version`)).json()).toEqual({ version: "0.22.0" });
    const missing = await fetch(`${root(engine)}/v2/nothing`);
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as Record<string, unknown>).error).toMatchObject({
      type: "Not Found",
      code: 404,
    });
    expect((await fetch(`${engine.url}/chat/completions`)).status).toBe(405);
  });

  it("exposes vLLM-named Prometheus counters that agree with stats()", async () => {
    const text = await (await fetch(`${root(engine)}/metrics`)).text();
    const stats = engine.stats();
    const value = (name: string): number => {
      const line = text.split("\n").find((l) => l.startsWith(`${name}{`));
      return Number(line?.split(" ").at(-1));
    };
    expect(text).toContain("# TYPE vllm:prompt_tokens_total counter");
    expect(text).toContain("# TYPE vllm:num_requests_running gauge");
    expect(value("vllm:prompt_tokens_total")).toBe(stats.promptTokens);
    expect(value("vllm:generation_tokens_total")).toBe(stats.generationTokens);
    expect(value("vllm:num_requests_running")).toBe(0);
    // prom-client writes whole numbers without vLLM's (Python's) ".0"; Prometheus reads both.
    expect(text).toMatch(
      /^vllm:request_success_total\{finished_reason="stop",engine="0",model_name="[^"]+"\} \d+$/m,
    );
    expect(stats.promptTokens).toBeGreaterThan(0);
    // What `rollgym bench` reads from an engine's /metrics.
    const { stop, length, abort } = stats.finishReasons;
    expect(await scrapeEngines([engine.url])).toEqual({
      requests: stop + length + abort,
      generatedTokens: stats.generationTokens,
      promptTokens: stats.promptTokens,
      running: 0,
      // Every request by route, the bench's own reads left out.
      routes: Object.fromEntries(
        Object.entries(stats.requestsByRoute).filter(
          ([route]) => route !== "/metrics" && route !== "/mock/stats",
        ),
      ),
    });
    expect(stats.requestsByRoute["/v1/chat/completions"]).toBeGreaterThan(0);
    expect(stats.requestsByRoute.other).toBeGreaterThan(0); // /v2/nothing
  });
});

describe("mock engine faults and load", () => {
  it("injects faults at the configured rates, reproducibly for a seed", async () => {
    const options: MockEngineOptions = {
      seed: 42,
      errorRate: 0.1,
      rateLimitRate: 0.05,
      dropRate: 0.05,
      slowRate: 0.1,
      slowMs: 1,
      formatErrorRate: 0.2,
    };
    const episode = firstTurn("SimpleSokoban", 3);
    const N = 400;
    const run = (): Promise<{ outcomes: Record<string, number>; stats: ReturnType<MockEngine["stats"]> }> =>
      withEngine(options, async (engine) => {
        const outcomes: Record<string, number> = {};
        await pool(N, 16, async () => {
          let key: string;
          try {
            const res = await fetch(`${engine.url}/chat/completions`, {
              method: "POST",
              headers: { "content-type": "application/json" },
              body: JSON.stringify(chatParams(episode)),
            });
            await res.arrayBuffer();
            key = String(res.status);
          } catch {
            key = "connection-error";
          }
          outcomes[key] = (outcomes[key] ?? 0) + 1;
        });
        return { outcomes, stats: engine.stats() };
      });
    const first = await run();
    // Exact for seed 42 and N requests, whatever the interleaving: each request's fate hangs on its index.
    expect(first.outcomes).toEqual({ "200": 328, "500": 25, "503": 11, "429": 20, "connection-error": 16 });
    expect(first.stats).toMatchObject({
      generations: N,
      completed: 328,
      internalErrors: 25,
      unavailable: 11,
      rateLimited: 20,
      dropped: 16,
      slow: 44,
      aborted: 0,
      formatErrors: 68,
    });
    // And sane: within a few binomial standard deviations of the configured rates.
    const near = (count: number, p: number): void => {
      expect(Math.abs(count - N * p)).toBeLessThan(4 * Math.sqrt(N * p * (1 - p)) + 1);
    };
    near(first.outcomes["500"] + first.outcomes["503"], 0.1);
    near(first.outcomes["429"], 0.05);
    near(first.outcomes["connection-error"], 0.05);
    near(first.stats.formatErrors, 0.2 * (first.stats.completed / N));
    const second = await run();
    expect(second.outcomes).toEqual(first.outcomes);
  });

  it("makes the openai client see a connection error on a drop, and an API error mid-stream", async () => {
    await withEngine({ dropRate: 1 }, async (engine) => {
      const err = await client(engine)
        .chat.completions.create(chatParams(firstTurn("SimpleSokoban", 1)))
        .catch((e) => e);
      expect(err).toBeInstanceOf(APIConnectionError);
      expect(engine.stats().dropped).toBe(1);
    });
    await withEngine({ errorRate: 1, unavailableShare: 0 }, async (engine) => {
      const stream = await client(engine).chat.completions.create({
        ...chatParams(firstTurn("SimpleSokoban", 1)),
        stream: true,
      });
      const err = await (async () => {
        for await (const _ of stream) {
          // drain until the error event
        }
      })().catch((e) => e);
      expect(err).toBeInstanceOf(OpenAI.APIError);
      expect(String(err.message)).toContain("Internal server error");
    });
  });

  it("queues requests beyond maxConcurrency", async () => {
    await withEngine({ maxConcurrency: 2, ttftMs: 5, tpotMs: 1 }, async (engine) => {
      const episode = firstTurn("SimpleSokoban", 2);
      const results = await pool(8, 8, () => client(engine).chat.completions.create(chatParams(episode)));
      expect(results).toHaveLength(8);
      const stats = engine.stats();
      expect(stats.peakRunning).toBe(2);
      expect(stats.completed).toBe(8);
      expect(stats).toMatchObject({ running: 0, waiting: 0 });
    });
  });

  it("counts a client that goes away as an abort", async () => {
    await withEngine({ ttftMs: 10_000 }, async (engine) => {
      const controller = new AbortController();
      const pending = fetch(`${engine.url}/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(chatParams(firstTurn("SimpleSokoban", 2))),
        signal: controller.signal,
      }).catch((e: unknown) => e);
      while (engine.stats().running === 0) await new Promise((r) => setTimeout(r, 5));
      controller.abort();
      await pending;
      while (engine.stats().aborted === 0) await new Promise((r) => setTimeout(r, 5));
      expect(engine.stats()).toMatchObject({ aborted: 1, running: 0, completed: 0 });
    });
  });
});

describe("mock-engine command", () => {
  it("parses flags and names the flag and range on bad input", () => {
    expect(
      parseMockEngineArgs(["--port", "0", "--error-rate=0.1", "--model", "a,b", "--max-concurrency", "4"]),
    ).toEqual({
      port: 0,
      errorRate: 0.1,
      model: ["a", "b"],
      maxConcurrency: 4,
    });
    const cases: [string[], RegExp][] = [
      [["--error-rate", "2"], /--error-rate: "2" is not a number from 0 to 1/],
      [["--port", "-1"], /--port: "-1" is not an integer from 0 to 65535/],
      [["--max-concurrency", "0"], /--max-concurrency/],
      [["--bogus", "1"], /unknown option --bogus/],
      [["--seed"], /--seed needs a value/],
      [["--drop-rate", "0.6", "--error-rate", "0.6"], /at most 1/],
    ];
    for (const [argv, message] of cases) {
      let caught: unknown;
      try {
        parseMockEngineArgs(argv);
      } catch (e) {
        caught = e;
      }
      expect(caught).toBeInstanceOf(MockEngineUsageError);
      // A mistake in the input: exit status 2 (errors/catalogue.ts).
      expect(exitStatus(caught)).toBe(2);
      expect((caught as Error).message).toMatch(message);
    }
  });

  it("prints its address, serves, and stops on SIGTERM", async () => {
    const child = spawn(
      join(ROOT, "node_modules/.bin/node"),
      ["src/mock-engine/cli.ts", "--port", "0", "--seed", "1"],
      {
        cwd: ROOT,
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    let stderr = "";
    child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
    const lines = createInterface({ input: child.stdout });
    const [line] = (await once(lines, "line")) as [string];
    const match =
      /^mock engine listening on (http:\/\/127\.0\.0\.1:\d+\/v1) \(model mock\/qwen-toy\); latency: no latency; policy-length answers$/.exec(
        line,
      );
    expect(match).not.toBeNull();
    const health = await fetch(`${match![1].slice(0, -3)}/health`);
    expect(health.status).toBe(200);
    child.kill("SIGTERM");
    const [code] = (await once(child, "exit")) as [number | null];
    expect(code).toBe(0);
    expect(stderr).toContain("mock engine stopped (SIGTERM)");
  });
});
