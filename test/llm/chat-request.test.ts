// What the chat policy puts on the wire, read by a bare HTTP server: every sampling field a
// server default could change, the extra body, the grammar in each dialect.
import { once } from "node:events";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ChatMessage } from "../../src/llm/chat.ts";
import type { Dialect } from "../../src/llm/engine.ts";
import { requestExtras } from "../../src/llm/extra-body.ts";
import { samplingFields } from "../../src/llm/generation.ts";
import { HistoryJson } from "../../src/llm/history-json.ts";
import { ChatPolicy } from "../../src/llm/openai-chat.ts";
import type { PolicyRequest } from "../../src/llm/policy.ts";
import { singleRequest } from "../helpers/recording-policy.ts";

let server: Server;
let url: string;
const bodies: Record<string, unknown>[] = [];
/** The bodies' text as it arrived. */
const texts: string[] = [];

const request = singleRequest("go");

beforeAll(async () => {
  server = createServer((req, res) => {
    let text = "";
    req.on("data", (chunk) => {
      text += chunk;
    });
    req.on("end", () => {
      texts.push(text);
      bodies.push(JSON.parse(text) as Record<string, unknown>);
      res.setHeader("content-type", "application/json");
      res.end(
        JSON.stringify({
          choices: [
            {
              message: { role: "assistant", content: "x</think><answer>Up</answer>" },
              finish_reason: "stop",
            },
          ],
        }),
      );
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
});
afterAll(() => {
  server.close();
});

async function sent(
  options: Partial<ConstructorParameters<typeof ChatPolicy>[0]>,
): Promise<Record<string, unknown>> {
  const policy = new ChatPolicy({ baseURL: url, model: "m", ...options });
  const response = await policy.generate(request);
  await policy.close();
  expect(response.text).toBe("x</think><answer>Up</answer>");
  return bodies.at(-1)!;
}

describe("chat request body", () => {
  it("sends every sampling field RAGEN's defaults fix, so no server default can fill one", async () => {
    const body = await sent({ dialect: "vllm" });
    expect(body).toMatchObject({
      temperature: 1,
      top_p: 1,
      top_k: -1,
      min_p: 0,
      repetition_penalty: 1,
      presence_penalty: 0,
      frequency_penalty: 0,
      max_tokens: 400,
      seed: 7,
      n: 1,
      continue_final_message: true,
      add_generation_prompt: false,
    });
    expect(body.messages).toEqual([
      { role: "user", content: "go" },
      { role: "assistant", content: "<think>" },
    ]);
  });

  it("merges extra_body last and sends the grammar in the engine's dialect", async () => {
    const vllm = await sent({
      dialect: "vllm",
      grammar: 'root ::= "x"',
      extraBody: { chat_template_kwargs: { enable_thinking: false }, min_tokens: 5 },
    });
    expect(vllm).toMatchObject({
      structured_outputs: { grammar: 'root ::= "x"' },
      chat_template_kwargs: { enable_thinking: false },
      min_tokens: 5,
    });
    const llama = await sent({ dialect: "llamacpp", grammar: 'root ::= "x"' });
    expect(llama).toMatchObject({
      grammar: 'root ::= "x"',
      repeat_penalty: 1,
      typical_p: 1,
      dry_multiplier: 0,
    });
    expect(llama).not.toHaveProperty("repetition_penalty");
  });

  it("sends seed null with request seeds off (vLLM's batched sampling), in chat and token requests alike", async () => {
    expect(await sent({ dialect: "vllm" })).toMatchObject({ seed: 7 });
    const body = await sent({ dialect: "vllm", requestSeeds: false });
    expect(body).toHaveProperty("seed", null);
    const policy = new ChatPolicy({
      baseURL: url,
      model: "m",
      requestSeeds: false,
      extraBody: { min_tokens: 1 },
    });
    // The token engine merges the transport's extra body last, as chat requests do.
    expect(policy.transport.extraBody).toEqual({ min_tokens: 1, seed: null });
    await policy.close();
  });
});

/** The body as the chat policy built it before it kept each episode's history as JSON. */
function objectBody(
  request: PolicyRequest,
  settings: {
    prefill: "continue" | "none";
    dialect: Dialect;
    grammar?: string;
    extraBody?: Record<string, unknown>;
    requestSeeds?: boolean;
  },
): Record<string, unknown> {
  const prefill = settings.prefill === "continue";
  const grammar = settings.grammar
    ? settings.dialect === "llamacpp"
      ? { grammar: settings.grammar }
      : { structured_outputs: { grammar: settings.grammar } }
    : {};
  return {
    model: "m",
    messages: prefill
      ? [...request.messages, { role: "assistant", content: request.prefill }]
      : [...request.messages],
    ...samplingFields(request.sampling, settings.dialect),
    ...(prefill ? { continue_final_message: true, add_generation_prompt: false } : {}),
    ...grammar,
    ...requestExtras(settings.extraBody ?? {}, settings.requestSeeds ?? true),
  };
}

describe("chat request body from the episode's serialised history", () => {
  // Turns as an episode sends them: each extends the one before, the last user message is
  // rebuilt (new strings, same text), then a window slides and the history starts over.
  const system: ChatMessage = { role: "system", content: 'You are a "Sokoban" solver.\n\u0001 é 漢' };
  const turn1: ChatMessage[] = [system, { role: "user", content: "State:\n#_P#\n" }];
  const turn2: ChatMessage[] = [
    system,
    { role: "user", content: ["State:", "#_P#", ""].join("\n") },
    { role: "assistant", content: "<think>left 🧱</think><answer>Left</answer>" },
    // A lone surrogate: JSON.stringify escapes it, so byte lengths of pieces still add up.
    { role: "user", content: "Reward:\n0\nState:\n#P_#\n\ud800" },
  ];
  const turn3: ChatMessage[] = [
    ...turn2,
    { role: "assistant", content: "<answer>Up</answer>" },
    { role: "user", content: "Reward:\n1\n" },
  ];
  const slid: ChatMessage[] = [system, { role: "user", content: "Reward:\n1\n" }];
  const turns = [turn1, turn2, turn3, slid, turn3];

  for (const settings of [
    { prefill: "continue" as const, dialect: "vllm" as const },
    {
      prefill: "continue" as const,
      dialect: "vllm" as const,
      grammar: 'root ::= "x"',
      extraBody: { chat_template_kwargs: { enable_thinking: false }, min_tokens: 5 },
      requestSeeds: false,
    },
    {
      prefill: "none" as const,
      dialect: "llamacpp" as const,
      grammar: 'root ::= "x"',
      extraBody: { chat_template_kwargs: { a: [1, "b"] } },
    },
  ]) {
    it(`sends the text JSON.stringify gives of the whole body, turn after turn (${settings.prefill}, ${settings.dialect}${settings.extraBody ? ", extra_body" : ""})`, async () => {
      const policy = new ChatPolicy({ baseURL: url, model: "m", ...settings });
      const history = new HistoryJson();
      for (const [k, messages] of turns.entries()) {
        const request: PolicyRequest = {
          ...singleRequest("unused", { seed: 100 + k, max_tokens: 50 + k }),
          messages,
          history,
        };
        await policy.generate(request);
        const expected = objectBody(request, settings);
        expect(texts.at(-1)).toBe(JSON.stringify(expected));
        expect(bodies.at(-1)).toEqual(expected);
      }
      // Without a history the body is the same.
      const request = { ...singleRequest("unused", { seed: 5 }), messages: turn3 };
      await policy.generate(request);
      expect(texts.at(-1)).toBe(JSON.stringify(objectBody(request, settings)));
      await policy.close();
    });
  }

  it("gives the elements JSON.stringify gives, whether a history extends, slides or starts over", () => {
    const history = new HistoryJson();
    expect(history.elements([])).toBe("");
    expect(history.bytes).toBe(0);
    for (const messages of [turn1, turn2, turn2, slid, turn3, turn1, [], turn3]) {
      const elements = history.elements(messages);
      expect(`[${elements}]`).toBe(JSON.stringify(messages));
      // The UTF-8 length it counted piece by piece is the text's.
      expect(history.bytes).toBe(Buffer.byteLength(elements));
    }
  });
});
