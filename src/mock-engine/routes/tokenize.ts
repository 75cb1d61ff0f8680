// POST /tokenize (a prompt, or chat `messages` through the template) and POST /detokenize, as
// vLLM answers them (facts §4.1), in the engine's tokenizer.
import type { EngineCore } from "../core.ts";
import { ApiError } from "../errors.ts";
import { sendJson } from "../http.ts";
import { parseDetokenizeRequest, parseTokenizeRequest } from "../validate.ts";
import { renderMessages } from "./chat-completions.ts";
import type { Routes } from "./route.ts";

export function tokenizeRoutes({ config, tokenizer, resolveModel }: EngineCore): Routes {
  return {
    "/tokenize": {
      methods: ["POST"],
      json: true,
      handle({ res, body }) {
        const parsed = parseTokenizeRequest(body);
        resolveModel(parsed.model);
        const text = parsed.kind === "chat" ? renderMessages(parsed, config.chatTemplate) : parsed.prompt;
        const tokens = tokenizer.encode(text);
        sendJson(res, 200, {
          count: tokens.length,
          max_model_len: config.maxModelLen,
          tokens,
          token_strs: parsed.returnTokenStrs ? tokens.map((id) => tokenizer.tokenStr(id)) : null,
        });
      },
    },
    "/detokenize": {
      methods: ["POST"],
      json: true,
      handle({ res, body }) {
        const parsed = parseDetokenizeRequest(body);
        resolveModel(parsed.model);
        const bad = parsed.tokens.find((id) => !tokenizer.isValidId(id));
        if (bad !== undefined)
          throw new ApiError(400, "BadRequestError", `Token id ${bad} is out of vocabulary`);
        sendJson(res, 200, { prompt: tokenizer.decode(parsed.tokens) });
      },
    },
  };
}
