// vLLM's RL control routes (facts §4.3): POST /pause?mode=abort|wait|keep, POST /resume,
// GET /is_paused. Always on here; vLLM ≥ 0.16 needs VLLM_SERVER_DEV_MODE=1.
import type { EngineCore } from "../core.ts";
import { validationError } from "../errors.ts";
import { sendJson } from "../http.ts";
import type { PauseMode } from "../pause.ts";
import type { Routes } from "./route.ts";

/** `mode` as FastAPI validates the Literal, and the deprecated wait flag. */
function pauseMode(url: URL): PauseMode {
  const raw = url.searchParams.get("mode") ?? "abort";
  if (raw !== "abort" && raw !== "wait" && raw !== "keep")
    throw validationError([
      {
        type: "literal_error",
        loc: ["query", "mode"],
        msg: "Input should be 'abort', 'wait' or 'keep'",
        input: raw,
        ctx: { expected: "'abort', 'wait' or 'keep'" },
      },
    ]);
  const legacyWait = ["1", "true", "t", "y", "yes", "on"].includes(
    (url.searchParams.get("wait_for_inflight_requests") ?? "").toLowerCase(),
  );
  return legacyWait ? "wait" : raw;
}

export function controlRoutes(core: EngineCore): Routes {
  return {
    "/pause": {
      methods: ["POST"],
      async handle({ res, url }) {
        await core.pause.pause(pauseMode(url));
        sendJson(res, 200, { status: "paused" });
      },
    },
    "/resume": {
      methods: ["POST"],
      handle({ res }) {
        core.pause.resume();
        sendJson(res, 200, { status: "resumed" });
      },
    },
    "/is_paused": {
      methods: ["GET"],
      handle: ({ res, echo }) => sendJson(res, 200, { is_paused: core.pause.mode !== null }, echo),
    },
  };
}
