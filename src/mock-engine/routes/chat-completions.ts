// POST /v1/chat/completions: the messages rendered by the chat template, vLLM's chat bodies and
// chunks (a role chunk opens each choice of a stream), the reasoning parser's split.

import { type ChatTemplateName, renderChat } from "../chat-template.ts";
import type { EngineCore } from "../core.ts";
import { splitReasoning } from "../reasoning.ts";
import { chatAbortChunk, chatCompletionBody, chatRoleChunk, chatTokenChunk } from "../responses.ts";
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
