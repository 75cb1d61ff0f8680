// GET /v1/models: vLLM's model cards, `max_model_len` included (facts §4.1).
import type { EngineCore } from "../core.ts";
import { sendJson } from "../http.ts";
import { mixSeed } from "../rng.ts";
import type { Routes } from "./route.ts";

function modelCards({ config, startedAt }: EngineCore): unknown {
  return {
    object: "list",
    data: config.models.map((id) => ({
      id,
      object: "model",
      created: startedAt,
      owned_by: "vllm",
      root: config.models[0],
      parent: null,
      max_model_len: config.maxModelLen,
      permission: [
        {
          id: `modelperm-${mixSeed(id).toString(16)}`,
          object: "model_permission",
          created: startedAt,
          allow_create_engine: false,
          allow_sampling: true,
          allow_logprobs: true,
          allow_search_indices: false,
          allow_view: true,
          allow_fine_tuning: false,
          organization: "*",
          group: null,
          is_blocking: false,
        },
      ],
    })),
  };
}

export function modelRoutes(core: EngineCore): Routes {
  return {
    "/v1/models": { methods: ["GET"], handle: ({ res, echo }) => sendJson(res, 200, modelCards(core), echo) },
  };
}
