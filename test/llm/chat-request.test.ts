// What the chat policy puts on the wire, read by a bare HTTP server: every sampling field a
// server default could change, the extra body, the grammar in each dialect.
import { once } from "node:events";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ChatPolicy } from "../../src/llm/openai-chat.ts";
import { singleRequest } from "../helpers/recording-policy.ts";

let server: Server;
let url: string;
const bodies: Record<string, unknown>[] = [];

const request = singleRequest("go");

beforeAll(async () => {
  server = createServer((req, res) => {
    let text = "";
    req.on("data", (chunk) => {
      text += chunk;
    });
    req.on("end", () => {
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
