// POST /v1/chat/completions: the messages rendered by the chat template, vLLM's chat bodies and
// chunks (a role chunk opens each choice of a stream), the reasoning parser's split.
import { type ChatTemplateName, renderChat } from "../chat-template.ts";
import type { EngineCore } from "../core.ts";
import type { Alternative, TokenLogprob } from "../generate.ts";
import { splitReasoning } from "../reasoning.ts";
import {
  completionTokensOf,
  type Json,
  label,
  promptLogprobsJson,
  type ResponseContext,
  usage,
} from "../responses.ts";
import type { MockTokenizer } from "../tokenizer.ts";
import { type ChatRequest, parseChatRequest } from "../validate.ts";
import { type Dialect, generationRoute } from "./generation.ts";
import type { Routes } from "./route.ts";

type Conversation = Pick<
  ChatRequest,
  "messages" | "addGenerationPrompt" | "continueFinalMessage" | "templateKwargs" | "tools"
>;

/** The text the chat template makes of a request's messages (here and on /tokenize). */
export function renderMessages(request: Conversation, template: ChatTemplateName): string {
  return renderChat(request.messages, {
    addGenerationPrompt: request.addGenerationPrompt,
    continueFinalMessage: request.continueFinalMessage,
    kwargs: request.templateKwargs,
    tools: request.tools,
    template,
  });
}

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

function chatCompletionBody(ctx: ResponseContext): Json {
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
function chatRoleChunk(ctx: ResponseContext, index = 0): Json {
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
function chatTokenChunk(ctx: ResponseContext, index: number, i: number): Json {
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
function chatAbortChunk(ctx: ResponseContext, index: number): Json {
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

const CHAT: Dialect<ChatRequest> = {
  parse: parseChatRequest,
  prompt(parsed, { config, tokenizer }) {
    const text = renderMessages(parsed, config.chatTemplate);
    return { text, ids: tokenizer.encode(text) };
  },
  split: (parsed, text, { reasoningParser }) =>
    reasoningParser === null
      ? null
      : splitReasoning(reasoningParser, text, parsed.templateKwargs, parsed.includeReasoning),
  body: chatCompletionBody,
  openChunks: (ctx, choice) => [chatRoleChunk(ctx, choice)],
  tokenChunks: (ctx) => (choice, step) => chatTokenChunk(ctx, choice, step),
  abortChunk: chatAbortChunk,
  assertsMaxTokens: false,
};

export function chatCompletionRoutes(core: EngineCore): Routes {
  return { "/v1/chat/completions": generationRoute(core, CHAT) };
}
