// vLLM's RL control routes (facts §4.3, async-rl.md §1.3): POST
// /pause?mode=abort|wait|keep&clear_cache=…, POST /resume, GET /is_paused, and the weight version label (POST /update_weight_version
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

const TRUE_WORDS = ["1", "on", "t", "true", "y", "yes"];
const FALSE_WORDS = ["0", "off", "f", "false", "n", "no"];

/** `clear_cache` as FastAPI parses a bool query parameter (default true, as vLLM's). */
function clearCache(url: URL): boolean {
  const raw = url.searchParams.get("clear_cache");
  if (raw === null) return true;
  if (TRUE_WORDS.includes(raw.toLowerCase())) return true;
  if (FALSE_WORDS.includes(raw.toLowerCase())) return false;
  throw validationError([
    {
      type: "bool_parsing",
      loc: ["query", "clear_cache"],
      msg: "Input should be a valid boolean, unable to interpret input",
      input: raw,
    },
  ]);
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
        const mode = pauseMode(url);
        const clear = clearCache(url);
        // vLLM's answer when pause_generation raises.
        if (core.pause.refusal !== null) {
          sendJson(res, 500, { error: `Failed to pause generation: ${core.pause.refusal}` });
          return;
        }
        await core.pause.pause(mode, clear);
        sendJson(res, 200, { status: "paused" });
      },
    },
    "/resume": {
      methods: ["POST"],
      handle({ res }) {
        if (core.pause.resumeFailures > 0) {
          core.pause.resumeFailures--;
          sendJson(res, 500, { error: "Failed to resume generation: injected failure" });
          return;
        }
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
