// Response bodies and SSE chunks in vLLM's shapes (facts: vllm-api.md §1.3, §2.2–2.3, §6).
// Non-streaming bodies carry every field, nulls included (pydantic model_dump); stream chunks
// carry only what vLLM sets on them.
import type { Alternative, Generation, PromptLogprob, TokenLogprob } from "./generate.ts";
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

function completionTokensOf(ctx: ResponseContext): number {
  return ctx.gens.reduce((sum, g) => sum + g.tokenIds.length, 0);
}

type Json = Record<string, unknown>;

export function usage(promptTokens: number, completionTokens: number): Json {
  return {
    prompt_tokens: promptTokens,
    total_tokens: promptTokens + completionTokens,
    completion_tokens: completionTokens,
    prompt_tokens_details: null,
  };
}

function label(tokenizer: MockTokenizer, id: number, asIds: boolean): string {
  return asIds ? `token_id:${id}` : tokenizer.tokenText(id);
}

// --- chat ------------------------------------------------------------------------------------

function chatEntry(tokenizer: MockTokenizer, a: Alternative, asIds: boolean): Json {
  return {
    token: label(tokenizer, a.id, asIds),
    logprob: a.logprob,
    bytes: asIds ? null : tokenizer.tokenBytes(a.id),
  };
}

/** `top_logprobs` lists the sampled token first, then alternatives, cut to the count asked. */
function chatLogprobs(
  tokenizer: MockTokenizer,
  entries: readonly TokenLogprob[],
  top: number,
  asIds: boolean,
): Json {
  return {
    content: entries.map((e) => {
      const all = [e, ...e.alternatives].map((a) => chatEntry(tokenizer, a, asIds));
      return { ...chatEntry(tokenizer, e, asIds), top_logprobs: top === -1 ? all : all.slice(0, top) };
    }),
  };
}

function promptLogprobsJson(
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

export function chatCompletionBody(ctx: ResponseContext): Json {
  const { req } = ctx;
  return {
    id: `chatcmpl-${ctx.id}`,
    object: "chat.completion",
    created: ctx.created,
    model: ctx.model,
    choices: ctx.gens.map((gen, index) => {
      // Without a reasoning parser the <think> block stays in content (what RAGEN parses).
      const split = ctx.splits[index] ?? { reasoning: null, content: gen.text };
      return {
        index,
        message: {
          role: "assistant",
          content: split.content,
          reasoning: split.reasoning,
          tool_calls: [],
          refusal: null,
          annotations: null,
          audio: null,
          function_call: null,
        },
        logprobs: gen.logprobs
          ? chatLogprobs(ctx.tokenizer, gen.logprobs, req.logprobs ?? 0, req.tokensAsIds)
          : null,
        finish_reason: gen.finishReason,
        stop_reason: gen.stopReason,
        token_ids: req.returnTokenIds ? gen.tokenIds : null,
      };
    }),
    service_tier: null,
    system_fingerprint: null,
    usage: usage(ctx.promptIds.length, completionTokensOf(ctx)),
    prompt_logprobs: promptLogprobsJson(ctx.tokenizer, ctx.gens[0].promptLogprobs),
    prompt_token_ids: req.returnTokenIds ? ctx.promptIds : null,
    prompt_text: null,
    kv_transfer_params: null,
  };
}

function chatChunk(ctx: ResponseContext, choice: Json, extra: Json = {}): Json {
  return {
    id: `chatcmpl-${ctx.id}`,
    object: "chat.completion.chunk",
    created: ctx.created,
    model: ctx.model,
    choices: [choice],
    ...extra,
  };
}

/** A choice's first chunk: the role, and the prompt ids when asked for. */
export function chatRoleChunk(ctx: ResponseContext, index = 0): Json {
  const extra: Json = ctx.req.returnTokenIds ? { prompt_token_ids: ctx.promptIds } : {};
  return chatChunk(
    ctx,
    { index, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null },
    extra,
  );
}

/**
 * The chunk for generated token `i` of choice `index`; the last one carries finish_reason and
 * stop_reason, unless the choice was aborted (its end comes in chatAbortChunk).
 */
export function chatTokenChunk(ctx: ResponseContext, index: number, i: number): Json {
  const { req } = ctx;
  const gen = ctx.gens[index];
  const last = i === gen.tokenIds.length - 1 && gen.finishReason !== "abort";
  const choice: Json = {
    index,
    delta: { content: gen.deltas[i] },
    logprobs: gen.logprobs
      ? chatLogprobs(ctx.tokenizer, [gen.logprobs[i]], req.logprobs ?? 0, req.tokensAsIds)
      : null,
    finish_reason: last ? gen.finishReason : null,
  };
  if (last) choice.stop_reason = gen.stopReason;
  if (req.returnTokenIds) choice.token_ids = [gen.tokenIds[i]];
  const extra: Json = req.continuousUsage ? { usage: usage(ctx.promptIds.length, i + 1) } : {};
  return chatChunk(ctx, choice, extra);
}

/** An aborted choice's end: no new text, finish_reason "abort" (vLLM skips it at 0 tokens). */
export function chatAbortChunk(ctx: ResponseContext, index: number): Json {
  const { req } = ctx;
  const choice: Json = {
    index,
    delta: { content: "" },
    logprobs: null,
    finish_reason: "abort",
    stop_reason: null,
  };
  if (req.returnTokenIds) choice.token_ids = [];
  const sent = ctx.gens[index].tokenIds.length;
  const extra: Json = req.continuousUsage ? { usage: usage(ctx.promptIds.length, sent) } : {};
  return chatChunk(ctx, choice, extra);
}

// --- completions -----------------------------------------------------------------------------

function completionLogprobs(
  tokenizer: MockTokenizer,
  entries: readonly TokenLogprob[],
  asIds: boolean,
  firstOffset: number,
): Json {
  const tokens: string[] = [];
  const tokenLogprobs: number[] = [];
  const topLogprobs: Json[] = [];
  const textOffset: number[] = [];
  let offset = firstOffset;
  for (const e of entries) {
    const token = label(tokenizer, e.id, asIds);
    tokens.push(token);
    tokenLogprobs.push(e.logprob);
    // Up to logprobs + 1 entries keyed by token string: the sampled one, then the top-k.
    const top: Json = { [token]: e.logprob };
    for (const a of e.alternatives) {
      const key = label(tokenizer, a.id, asIds);
      if (!(key in top)) top[key] = a.logprob;
    }
    topLogprobs.push(top);
    textOffset.push(offset);
    offset += token.length;
  }
  return { text_offset: textOffset, token_logprobs: tokenLogprobs, tokens, top_logprobs: topLogprobs };
}

export function completionBody(ctx: ResponseContext): Json {
  const { req } = ctx;
  return {
    id: `cmpl-${ctx.id}`,
    object: "text_completion",
    created: ctx.created,
    model: ctx.model,
    choices: ctx.gens.map((gen, index) => ({
      index,
      text: gen.text,
      logprobs: gen.logprobs ? completionLogprobs(ctx.tokenizer, gen.logprobs, req.tokensAsIds, 0) : null,
      finish_reason: gen.finishReason,
      stop_reason: gen.stopReason,
      token_ids: req.returnTokenIds ? gen.tokenIds : null,
      prompt_logprobs: promptLogprobsJson(ctx.tokenizer, gen.promptLogprobs),
      prompt_token_ids: req.returnTokenIds ? ctx.promptIds : null,
    })),
    service_tier: null,
    system_fingerprint: null,
    usage: usage(ctx.promptIds.length, completionTokensOf(ctx)),
    kv_transfer_params: null,
  };
}

/** Where text_offset of token i of a choice starts: the token strings before it, end to end. */
export function completionOffsets(ctx: ResponseContext, index = 0): number[] {
  const offsets: number[] = [];
  let offset = 0;
  for (const id of ctx.gens[index].tokenIds) {
    offsets.push(offset);
    offset += label(ctx.tokenizer, id, ctx.req.tokensAsIds).length;
  }
  return offsets;
}

export function completionTokenChunk(
  ctx: ResponseContext,
  index: number,
  i: number,
  offsets: readonly number[],
): Json {
  const { req } = ctx;
  const gen = ctx.gens[index];
  const last = i === gen.tokenIds.length - 1 && gen.finishReason !== "abort";
  const choice: Json = {
    index,
    text: gen.deltas[i],
    logprobs: gen.logprobs
      ? completionLogprobs(ctx.tokenizer, [gen.logprobs[i]], req.tokensAsIds, offsets[i])
      : null,
    finish_reason: last ? gen.finishReason : null,
    stop_reason: last ? gen.stopReason : null,
  };
  // Prompt ids ride on the first chunk only.
  if (req.returnTokenIds) {
    choice.prompt_token_ids = i === 0 ? ctx.promptIds : null;
    choice.token_ids = [gen.tokenIds[i]];
  }
  return completionChunk(ctx, choice, i + 1);
}

/** One completions stream chunk around `choice`; usage so far when continuous usage is on. */
function completionChunk(ctx: ResponseContext, choice: Json, generated: number): Json {
  const chunk: Json = {
    id: `cmpl-${ctx.id}`,
    object: "text_completion",
    created: ctx.created,
    model: ctx.model,
    choices: [choice],
  };
  if (ctx.req.continuousUsage) chunk.usage = usage(ctx.promptIds.length, generated);
  return chunk;
}

/** An aborted choice's end in a completions stream: no new text, finish_reason "abort". */
export function completionAbortChunk(ctx: ResponseContext, index: number): Json {
  const { req } = ctx;
  const choice: Json = { index, text: "", logprobs: null, finish_reason: "abort", stop_reason: null };
  if (req.returnTokenIds) {
    choice.prompt_token_ids = null;
    choice.token_ids = [];
  }
  return completionChunk(ctx, choice, ctx.gens[index].tokenIds.length);
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
