// vLLM's RL control routes (facts §4.3, async-rl.md §1.3): POST /pause?mode=abort|wait|keep,
// POST /resume, GET /is_paused, and the weight version label (POST /update_weight_version
// {new_version}, GET /weight_info). Always on here unless `pauseRoutes: false` (llama.cpp, or
// vLLM without VLLM_SERVER_DEV_MODE, which ≥ 0.16 needs). Plus the test-only routes of a
// simulated trainer: POST /mock/load_weights {version} and GET /mock/generations.
import { PAUSE_MODES } from "../../../protocol/settings.ts";
import type { EngineCore } from "../core.ts";
import { validationError } from "../errors.ts";
import { sendJson } from "../http.ts";
import type { PauseMode } from "../pause.ts";
import type { Routes } from "./route.ts";

/** `mode` as FastAPI validates the Literal, and the deprecated wait flag. */
function pauseMode(url: URL): PauseMode {
  const raw = url.searchParams.get("mode") ?? "abort";
  if (!(PAUSE_MODES as readonly string[]).includes(raw))
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
  return legacyWait ? "wait" : (raw as PauseMode);
}

/** A required non-empty string field of a body, refused as pydantic would (400, its loc). */
function label(body: Record<string, unknown>, field: string): string {
  const value = body[field];
  if (typeof value === "string" && value !== "") return value;
  throw validationError([
    value === undefined
      ? { type: "missing", loc: ["body", field], msg: "Field required", input: body }
      : { type: "string_type", loc: ["body", field], msg: "Input should be a valid string", input: value },
  ]);
}

export function controlRoutes(core: EngineCore): Routes {
  const engineRoutes: Routes = {
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
    // The label only: the weights are what /mock/load_weights put there.
    "/update_weight_version": {
      methods: ["POST"],
      json: true,
      handle({ res, body }) {
        const version = label(body, "new_version");
        core.weights.label = version;
        sendJson(res, 200, { success: true, new_version: version });
      },
    },
    "/weight_info": {
      methods: ["GET"],
      handle: ({ res, echo }) => sendJson(res, 200, { weight_version: core.weights.label }, echo),
    },
  };
  return {
    ...(core.config.pauseRoutes ? engineRoutes : {}),
    // A simulated trainer's load: applied between decode steps, to requests running or queued.
    "/mock/load_weights": {
      methods: ["POST"],
      json: true,
      handle({ res, body }) {
        const version = label(body, "version");
        core.weights.load(version, () => core.scheduler.advance());
        sendJson(res, 200, { loaded: version, paused: core.pause.mode !== null });
      },
    },
    "/mock/generations": {
      methods: ["GET"],
      handle: ({ res, echo }) => sendJson(res, 200, core.weights.records(), echo),
    },
  };
}
