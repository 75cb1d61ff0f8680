// POST /v1/completions: a text prompt, or token ids taken as they are (token in, token out;
// facts §1.2, §7.1), vLLM's completion bodies and chunks with their text offsets.
import type { EngineCore } from "../core.ts";
import {
  completionAbortChunk,
  completionBody,
  completionOffsets,
  completionTokenChunk,
} from "../responses.ts";
import { type CompletionRequest, parseCompletionRequest } from "../validate.ts";
import { type Dialect, generationRoute } from "./generation.ts";
import type { Routes } from "./route.ts";

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
