// POST /v1/completions: a text prompt, or token ids taken as they are (token in, token out;
// facts §1.2, §7.1), vLLM's completion bodies and chunks with their text offsets.
import type { EngineCore } from "../core.ts";
import type { TokenLogprob } from "../generate.ts";
import {
  completionTokensOf,
  type Json,
  label,
  promptLogprobsJson,
  type ResponseContext,
  usage,
} from "../responses.ts";
import type { MockTokenizer } from "../tokenizer.ts";
import { type CompletionRequest, parseCompletionRequest } from "../validate.ts";
import { type Dialect, generationRoute } from "./generation.ts";
import type { Routes } from "./route.ts";

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

function completionBody(ctx: ResponseContext): Json {
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
function completionOffsets(ctx: ResponseContext, index = 0): number[] {
  const offsets: number[] = [];
  let offset = 0;
  for (const id of ctx.gens[index].tokenIds) {
    offsets.push(offset);
    offset += label(ctx.tokenizer, id, ctx.req.tokensAsIds).length;
  }
  return offsets;
}

function completionTokenChunk(
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
function completionAbortChunk(ctx: ResponseContext, index: number): Json {
  const { req } = ctx;
  const choice: Json = { index, text: "", logprobs: null, finish_reason: "abort", stop_reason: null };
  if (req.returnTokenIds) {
    choice.prompt_token_ids = null;
    choice.token_ids = [];
  }
  return completionChunk(ctx, choice, ctx.gens[index].tokenIds.length);
}

const COMPLETION: Dialect<CompletionRequest> = {
  parse: parseCompletionRequest,
  prompt({ prompt }, { tokenizer }) {
    if ("text" in prompt) return { text: prompt.text, ids: tokenizer.encode(prompt.text) };
    // Token prompts are not re-tokenized; the policy reads their text (bad ids fail later).
    const ids = prompt.ids;
    return { text: tokenizer.decode(ids.filter((id) => tokenizer.isValidId(id))), ids: [...ids] };
  },
  split: () => null,
  body: completionBody,
  openChunks: () => [],
  tokenChunks(ctx) {
    const offsets = ctx.gens.map((_, choice) => completionOffsets(ctx, choice));
    return (choice, step) => completionTokenChunk(ctx, choice, step, offsets[choice]);
  },
  abortChunk: completionAbortChunk,
  assertsMaxTokens: true,
};

export function completionRoutes(core: EngineCore): Routes {
  return { "/v1/completions": generationRoute(core, COMPLETION) };
}
