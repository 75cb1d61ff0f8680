// Liveness and load, as vLLM answers them: GET /health, GET|POST /ping (SageMaker's), GET
// /version, GET /load.
import type { EngineCore } from "../core.ts";
import { sendJson } from "../http.ts";
import type { RouteRequest, Routes } from "./route.ts";

function ok({ res, echo }: RouteRequest): void {
  res.writeHead(200, { "content-length": 0, ...echo }).end();
}

export function healthRoutes(core: EngineCore): Routes {
  return {
    "/health": { methods: ["GET"], handle: ok },
    "/ping": { methods: ["GET", "POST"], handle: ok },
    "/version": {
      methods: ["GET"],
      handle: ({ res, echo }) => sendJson(res, 200, { version: core.config.version }, echo),
    },
    "/load": {
      methods: ["GET"],
      handle: ({ res, echo }) =>
        sendJson(res, 200, { server_load: core.stats.running + core.stats.waiting }, echo),
    },
  };
}
