// Integration test against a real llama.cpp llama-server with the tiny random-weight Qwen3 model.
// Needs `scripts/llama/build.sh` to have run (CI runs it first); without the build this test
// fails with the helper's message instead of skipping.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LlamaServer, ragenGrammar, startLlamaServer } from "../../scripts/llama/server.ts";

const ANSWER =
  /^<think>[\s\S]*?<\/think><answer>(Up|Down|Left|Right)( \|\| (Up|Down|Left|Right))?<\/answer>$/;

/** How the Qwen3 chat template renders a final assistant message "<think>" (llama-server and HF agree). */
const RENDERED_PREFILL = "<think>\n\n</think>\n\n<think>";

const SYSTEM =
  "You're a helpful assistant. You are solving the Sokoban puzzle. You are the player and you need to push all boxes to targets.\n" +
  "The answer should be a sequence of actions, like <answer>Right || Right || Up</answer>.\n" +
  "Your available actions are:\nUp, Down, Left, Right\n" +
  'You can make up to 10 actions, separated by the action separator " || "\n';
const USER =
  "\nTurn 1:\nState:\n######\n#O####\n#__###\n#X_###\n#_P_##\n######\n" +
  "You have 10 actions left. Always output: <think> [Your thoughts] </think> <answer> [your answer] </answer> " +
  "with no extra text. Strictly follow this format. Max response length: 120 words (tokens).\n";

interface ChatResponse {
  choices: { message: { role: string; content: string }; finish_reason: string }[];
  usage: { prompt_tokens: number; completion_tokens: number };
}

let server: LlamaServer;

async function post<T>(path: string, body: unknown): Promise<T> {
  const res = await fetch(`${server.baseUrl}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`POST ${path}: ${res.status} ${text}`);
  return JSON.parse(text) as T;
}

function ragenRequest(seed: number) {
  return {
    model: server.model,
    messages: [
      { role: "system", content: SYSTEM },
      { role: "user", content: USER },
      { role: "assistant", content: "<think>" },
    ],
    continue_final_message: true,
    add_generation_prompt: false,
    grammar: ragenGrammar(),
    max_tokens: 48,
    temperature: 1,
    seed,
  };
}

describe("llama-server (tiny random-weight Qwen3)", () => {
  beforeAll(async () => {
    server = await startLlamaServer();
  }, 90_000);

  afterAll(async () => {
    await server?.stop();
  });

  it("lists the served model", async () => {
    const res = await fetch(`${server.baseUrl}/v1/models`);
    expect(res.status).toBe(200);
    const body = (await res.json()) as { data: { id: string }[] };
    expect(body.data.map((m) => m.id)).toContain(server.model);
  });

  it("tokenizes with the real Qwen3 tokenizer", async () => {
    const body = await post<{ tokens: number[] }>("/tokenize", { content: "Hello world<|im_end|>" });
    expect(body.tokens).toEqual([9707, 1879, 151645]);
  });

  it("continues a <think> prefill into a RAGEN-parseable answer, reproducibly per seed", async () => {
    const first = await post<ChatResponse>("/v1/chat/completions", ragenRequest(7));
    const content = first.choices[0].message.content;
    const text = content.startsWith("<think>") ? content : `<think>${content}`;
    expect(text).toMatch(ANSWER);
    expect(first.choices[0].finish_reason).toBe("stop");
    expect(first.usage.completion_tokens).toBeLessThanOrEqual(48);

    const again = await post<ChatResponse>("/v1/chat/completions", ragenRequest(7));
    expect(again.choices[0].message.content).toBe(content);
  });

  it("renders the prefill through the Qwen3 template and echoes it in non-streaming content", async () => {
    // Pinned server behaviour (see scripts/llama/README.md): the template renders the final
    // assistant message "<think>" as "<think>\n\n</think>\n\n<think>", generation continues after
    // it, and non-streaming message.content = that rendered prefix + the continuation.
    const { content } = (await post<ChatResponse>("/v1/chat/completions", ragenRequest(7))).choices[0]
      .message;
    expect(content.startsWith(RENDERED_PREFILL)).toBe(true);
    expect(`<think>${content.slice(RENDERED_PREFILL.length)}`).toMatch(ANSWER);

    // Streaming deltas carry only the continuation.
    const res = await fetch(`${server.baseUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ ...ragenRequest(7), stream: true }),
    });
    expect(res.status).toBe(200);
    let streamed = "";
    for (const line of (await res.text()).split("\n")) {
      if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
      const chunk = JSON.parse(line.slice(6)) as { choices: { delta: { content?: string | null } }[] };
      streamed += chunk.choices[0]?.delta.content ?? "";
    }
    expect(RENDERED_PREFILL + streamed).toBe(content);
  });

  it("continues a RAGEN-exact raw prompt on /v1/completions with the same grammar", async () => {
    const prompt =
      `<|im_start|>system\n${SYSTEM}<|im_end|>\n<|im_start|>user\n${USER}<|im_end|>\n` +
      "<|im_start|>assistant\n<think>";
    const body = await post<{ choices: { text: string; finish_reason: string }[] }>("/v1/completions", {
      model: server.model,
      prompt,
      grammar: ragenGrammar(),
      max_tokens: 48,
      temperature: 1,
      seed: 7,
    });
    expect(`<think>${body.choices[0].text}`).toMatch(ANSWER);
    expect(body.choices[0].finish_reason).toBe("stop");
  });
});
