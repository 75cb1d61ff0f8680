// What vLLM's response bodies and SSE chunks of both generation routes share (facts:
// vllm-api.md §1.3, §2.2–2.3, §6): usage, token labels, prompt logprobs, the usage chunk. The
// route modules build the rest (routes/chat-completions.ts, routes/completions.ts).
// Non-streaming bodies carry every field, nulls included (pydantic model_dump); stream chunks
// carry only what vLLM sets on them.
import type { Generation, PromptLogprob } from "./generate.ts";
import type { ReasoningSplit } from "./reasoning.ts";
import type { MockTokenizer } from "./tokenizer.ts";
import type { GenerationRequest } from "./validate.ts";

export interface ResponseContext {
  tokenizer: MockTokenizer;
  id: string;
  created: number;
  model: string;
  req: GenerationRequest;
  promptIds: readonly number[];
  /** One generation per choice (`n`), each as it is reported (complete or aborted). */
  gens: readonly Generation[];
  /** Per choice: the reasoning parser's split of the text, or null when no parser runs. */
  splits: readonly (ReasoningSplit | null)[];
}

export function completionTokensOf(ctx: ResponseContext): number {
  return ctx.gens.reduce((sum, g) => sum + g.tokenIds.length, 0);
}

export type Json = Record<string, unknown>;

export function usage(promptTokens: number, completionTokens: number): Json {
  return {
    prompt_tokens: promptTokens,
    total_tokens: promptTokens + completionTokens,
    completion_tokens: completionTokens,
    prompt_tokens_details: null,
  };
}

/** A token as logprobs name it: its text, or `token_id:<id>` (return_tokens_as_token_ids). */
export function label(tokenizer: MockTokenizer, id: number, asIds: boolean): string {
  return asIds ? `token_id:${id}` : tokenizer.tokenText(id);
}

/** `prompt_logprobs`: per prompt position, the token and its alternatives by id (null first). */
export function promptLogprobsJson(
  tokenizer: MockTokenizer,
  entries: readonly (PromptLogprob | null)[] | null,
): unknown {
  if (entries === null) return null;
  const text = (id: number): string => tokenizer.tokenText(id);
  return entries.map((e) => {
    if (e === null) return null;
    const out: Json = { [e.id]: { logprob: e.logprob, rank: e.rank, decoded_token: text(e.id) } };
    for (const a of e.alternatives)
      out[a.id] = { logprob: a.logprob, rank: a.rank, decoded_token: text(a.id) };
    return out;
  });
}

/** The final `choices: []` chunk with usage (stream_options.include_usage). */
export function usageChunk(ctx: ResponseContext, completionTokens = completionTokensOf(ctx)): Json {
  return {
    id: `${ctx.req.kind === "chat" ? "chatcmpl" : "cmpl"}-${ctx.id}`,
    object: ctx.req.kind === "chat" ? "chat.completion.chunk" : "text_completion",
    created: ctx.created,
    model: ctx.model,
    choices: [],
    usage: usage(ctx.promptIds.length, completionTokens),
  };
}
