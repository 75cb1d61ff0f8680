// The OpenAI-compatible chat policy (vLLM in production), through the `openai` package.
// Every sampling field is sent explicitly; the generation prompt's "<think>" is sent as an
// assistant prefill that the server continues (vLLM's continue_final_message). Requests are
// limited per endpoint, time out, and are retried with exponential backoff on 429, 5xx and
// connection errors; when retries run out the error says why, and the episode is failed.
import OpenAI from "openai";
import { Limiter } from "./limiter.ts";
import { type Policy, PolicyError, type PolicyRequest, type PolicyResponse } from "./policy.ts";

export interface ChatPolicyOptions {
  baseURL: string;
  model: string;
  apiKey?: string | null;
  /** Requests in flight to this endpoint at most. */
  concurrency?: number;
  timeoutMs?: number;
  /** Retries after the first attempt, for retryable failures only. */
  maxRetries?: number;
  /** First backoff; doubles per retry up to maxBackoffMs. */
  backoffMs?: number;
  maxBackoffMs?: number;
  /**
   * "continue": send the prefill as a final assistant message the server continues (vLLM:
   * continue_final_message). "none": send no prefill; the model writes its own tags.
   */
  prefill?: "continue" | "none";
  /** Extra body fields for engine dialects (e.g. llama.cpp's `grammar`). */
  extraBody?: Record<string, unknown>;
}

const RETRYABLE_STATUS = new Set([408, 409, 429]);

function isRetryable(error: unknown): boolean {
  if (error instanceof OpenAI.APIConnectionError) return true;
  if (error instanceof OpenAI.APIError && typeof error.status === "number") {
    return RETRYABLE_STATUS.has(error.status) || error.status >= 500;
  }
  return false;
}

function describe(error: unknown): string {
  if (error instanceof OpenAI.APIConnectionTimeoutError) return "request timed out";
  if (error instanceof OpenAI.APIConnectionError)
    return `connection error (${error.cause instanceof Error ? error.cause.message : error.message})`;
  if (error instanceof OpenAI.APIError) return `HTTP ${error.status ?? "?"}: ${error.message}`;
  return error instanceof Error ? error.message : String(error);
}

export class ChatPolicy implements Policy {
  readonly name = "openai-chat";
  private readonly client: OpenAI;
  private readonly options: Required<Omit<ChatPolicyOptions, "apiKey" | "extraBody">> &
    Pick<ChatPolicyOptions, "extraBody">;
  private readonly limiter: Limiter;
  /** Request outcomes, for reports and metrics. */
  readonly stats = { requests: 0, retries: 0, failures: 0 };

  constructor(options: ChatPolicyOptions) {
    this.options = {
      concurrency: 64,
      timeoutMs: 300_000,
      maxRetries: 4,
      backoffMs: 500,
      maxBackoffMs: 10_000,
      prefill: "continue",
      ...options,
    };
    this.client = new OpenAI({
      baseURL: options.baseURL,
      apiKey: options.apiKey ?? process.env.OPENAI_API_KEY ?? "EMPTY",
      timeout: this.options.timeoutMs,
      maxRetries: 0, // retries are ours, so each failure reason is known
    });
    this.limiter = new Limiter(this.options.concurrency);
  }

  /** Check the endpoint answers and serves the model; throws PolicyError naming the problem. */
  async preflight(signal?: AbortSignal): Promise<void> {
    let served: string[];
    try {
      const page = await this.client.models.list({
        signal,
        timeout: Math.min(this.options.timeoutMs, 10_000),
      });
      served = page.data.map((m) => m.id);
    } catch (error) {
      throw new PolicyError(`cannot reach ${this.options.baseURL}: ${describe(error)}`);
    }
    if (!served.includes(this.options.model)) {
      throw new PolicyError(
        `model ${JSON.stringify(this.options.model)} is not served by ${this.options.baseURL} (it serves: ${served.join(", ") || "nothing"})`,
      );
    }
  }

  async generate(request: PolicyRequest): Promise<PolicyResponse> {
    return this.limiter.run(() => this.generateWithRetries(request));
  }

  private async generateWithRetries(request: PolicyRequest): Promise<PolicyResponse> {
    const { maxRetries, backoffMs, maxBackoffMs } = this.options;
    for (let attempt = 0; ; attempt++) {
      this.stats.requests++;
      try {
        return { ...(await this.once(request)), attempts: attempt + 1 };
      } catch (error) {
        if (request.signal?.aborted) throw new PolicyError("cancelled");
        if (!isRetryable(error)) {
          this.stats.failures++;
          throw new PolicyError(describe(error));
        }
        if (attempt >= maxRetries) {
          this.stats.failures++;
          throw new PolicyError(`${describe(error)} (gave up after ${attempt + 1} attempts)`, true);
        }
        this.stats.retries++;
        const delay = Math.min(maxBackoffMs, backoffMs * 2 ** attempt) * (0.5 + Math.random() / 2);
        await new Promise((resolve) => setTimeout(resolve, delay));
      }
    }
  }

  private async once(request: PolicyRequest): Promise<PolicyResponse> {
    const { sampling } = request;
    const prefill = this.options.prefill === "continue";
    const messages = prefill
      ? [...request.messages, { role: "assistant" as const, content: request.prefill }]
      : [...request.messages];
    const body = {
      model: this.options.model,
      messages,
      temperature: sampling.temperature,
      top_p: sampling.top_p,
      max_tokens: sampling.max_tokens,
      seed: sampling.seed,
      stop: sampling.stop ?? null,
      n: 1,
      // vLLM's sampling extras and prefill switches, sent explicitly.
      top_k: sampling.top_k,
      min_p: sampling.min_p,
      ...(prefill ? { continue_final_message: true, add_generation_prompt: false } : {}),
      ...this.options.extraBody,
    };
    const completion = await this.client.chat.completions.create(
      body as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming,
      { signal: request.signal },
    );
    const choice = completion.choices[0];
    if (!choice) throw new PolicyError("the response has no choices");
    const message = choice.message as {
      content: string | null;
      reasoning?: string | null;
      reasoning_content?: string | null;
    };
    // A server-side reasoning parser splits "<think>" text off; put it back where RAGEN expects it.
    const reasoning = message.reasoning ?? message.reasoning_content;
    let text = reasoning ? `${reasoning}</think>${message.content ?? ""}` : (message.content ?? "");
    // Without a prefill the model writes the opening tag itself; the episode adds it back.
    if (!prefill && text.startsWith(request.prefill)) text = text.slice(request.prefill.length);
    return {
      text,
      finishReason: choice.finish_reason ?? "unknown",
      promptTokens: completion.usage?.prompt_tokens,
      completionTokens: completion.usage?.completion_tokens,
    };
  }
}
