// A plain load generator: `concurrency` loops, each sending chat completions back to back to the
// engines (round robin), with no environment, no parsing and no server between. What the engine
// delivers to it is the reference the engine saturation ratio divides by.
import http from "node:http";

import type { ChatMessages } from "./trainer.ts";

export interface LoadOptions {
  /** OpenAI base URLs (…/v1). */
  urls: readonly string[];
  model: string;
  /** Prompts to cycle through (the rollout's first-turn chats). */
  prompts: readonly ChatMessages[];
  maxTokens: number;
  /** Requests in flight at once. */
  concurrency: number;
  /** Called when the loops should stop sending; in-flight requests still finish. */
  stopped: () => boolean;
  /** Each finished request (for warm-up detection and progress). */
  onResponse?: () => void;
  /** An assistant prefill sent with continue_final_message, as rollgym's policy sends it. */
  prefill: string | null;
}

export interface LoadResult {
  requests: number;
  failures: number;
  /** The first failure's message, if any. */
  firstError: string | null;
}

/** Runs until `stopped()` and every in-flight request has finished. */
export async function generateLoad(options: LoadOptions): Promise<LoadResult> {
  const agents = options.urls.map(
    () =>
      new http.Agent({
        keepAlive: true,
        maxSockets: options.concurrency,
        maxFreeSockets: options.concurrency,
      }),
  );
  const bodies = chatBodies(options, options.prompts);
  const targets = options.urls.map((url) => new URL(`${url.replace(/\/+$/, "")}/chat/completions`));
  const result: LoadResult = { requests: 0, failures: 0, firstError: null };
  let next = 0;
  const loop = async (): Promise<void> => {
    while (!options.stopped()) {
      const i = next++;
      const target = i % targets.length;
      try {
        await post(targets[target], agents[target], bodies[i % bodies.length]);
        result.requests++;
      } catch (error) {
        result.failures++;
        result.firstError ??= error instanceof Error ? error.message : String(error);
        // A failing engine must not turn the loops into a busy spin.
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      options.onResponse?.();
    }
  };
  try {
    await Promise.all(Array.from({ length: options.concurrency }, loop));
  } finally {
    for (const agent of agents) agent.destroy();
  }
  return result;
}

/** The generator's request bodies, one per prompt (the floor clients send the same). */
export function chatBodies(
  options: Pick<LoadOptions, "model" | "maxTokens" | "prefill">,
  prompts: readonly ChatMessages[],
): string[] {
  return prompts.map((messages) => chatBody(options, messages));
}

/** A chat request as rollgym's policy words it: the prefill continued, max_tokens, temperature 1. */
function chatBody(
  options: Pick<LoadOptions, "model" | "maxTokens" | "prefill">,
  messages: ChatMessages,
): string {
  const prefill = options.prefill;
  return JSON.stringify({
    model: options.model,
    messages: prefill === null ? messages : [...messages, { role: "assistant", content: prefill }],
    max_tokens: options.maxTokens,
    temperature: 1,
    ...(prefill === null ? {} : { continue_final_message: true, add_generation_prompt: false }),
  });
}

/** One chat completion's text (for building the prompt mix). */
export async function chatOnce(
  url: string,
  options: Pick<LoadOptions, "model" | "maxTokens" | "prefill">,
  messages: ChatMessages,
): Promise<string> {
  const agent = new http.Agent({ keepAlive: false });
  const body = await post(
    new URL(`${url.replace(/\/+$/, "")}/chat/completions`),
    agent,
    chatBody(options, messages),
  );
  const content = (JSON.parse(body) as { choices: { message: { content: string | null } }[] }).choices[0]
    ?.message?.content;
  return content ?? "";
}

function post(url: URL, agent: http.Agent, body: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const request = http.request(
      url,
      {
        method: "POST",
        agent,
        headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body) },
      },
      (response) => {
        const chunks: Buffer[] = [];
        response.on("data", (chunk: Buffer) => chunks.push(chunk));
        response.on("end", () => {
          if (response.statusCode !== 200) {
            reject(
              new Error(
                `HTTP ${response.statusCode}: ${Buffer.concat(chunks).toString("utf8").slice(0, 200)}`,
              ),
            );
            return;
          }
          // Parsed as a client would, so the generator pays what any client pays for an answer.
          const text = Buffer.concat(chunks).toString("utf8");
          JSON.parse(text);
          resolve(text);
        });
        response.on("error", reject);
      },
    );
    request.on("error", reject);
    request.end(body);
  });
}
