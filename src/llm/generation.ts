// What every generation request sends and every answer must end with, shared by chat turns
// (openai-chat.ts) and token-mode completions (token-engine.ts).
import { SAMPLING, type SamplingField } from "../../protocol/settings.ts";
import type { SamplingParams } from "./chat.ts";
import type { Dialect } from "./engine.ts";
import { EngineError } from "./http.ts";

/** Sampling fields llama.cpp spells differently (vLLM takes the settings' own names). */
export const LLAMACPP_NAMES: Readonly<Partial<Record<SamplingField, string>>> = {
  repetition_penalty: "repeat_penalty",
};

/**
 * Every sampling field a server default could change, in the engine's dialect: each setting of
 * protocol/settings.ts (one left unset is absent), and llama.cpp's own samplers, which its server
 * flags can turn on, pinned to "off".
 */
export function samplingFields(sampling: SamplingParams, dialect: Dialect): Record<string, unknown> {
  const settings: Record<string, unknown> = {};
  for (const name of Object.keys(SAMPLING) as SamplingField[]) {
    if (sampling[name] === undefined) continue;
    settings[(dialect === "llamacpp" && LLAMACPP_NAMES[name]) || name] = sampling[name];
  }
  const own =
    dialect === "llamacpp"
      ? {
          typical_p: 1,
          dry_multiplier: 0,
          xtc_probability: 0,
          mirostat: 0,
          top_n_sigma: -1,
        }
      : {
          // A stop string stays in the text (vLLM drops it by default), so the scored response
          // is what the model wrote: RAGEN's parser needs a closing tag used as a stop.
          include_stop_str_in_output: true,
        };
  return {
    ...settings,
    ...own,
    seed: sampling.seed,
    stop: sampling.stop ?? null,
    n: 1,
  };
}

/**
 * Lets `stop` and `length` through as model turns and turns every other finish reason into an
 * EngineError: `abort` (vLLM's /pause, an aborting shutdown: partial text that must never be
 * scored) and `error` are retried, and an abort is not the replica's fault (a pause aborts
 * every replica at once); anything else (tool_calls, content_filter, none) fails the episode
 * with its name rather than being scored silently.
 */
export function checkFinishReason(reason: string | null): asserts reason is "stop" | "length" {
  switch (reason) {
    case "stop":
    case "length":
      return;
    case "abort":
      throw new EngineError("the engine aborted the request (finish_reason abort)", 503, null, false);
    case "error":
      throw new EngineError("the engine failed the request (finish_reason error)", 500);
    default:
      throw new EngineError(`unexpected finish_reason ${JSON.stringify(reason)}`, 422);
  }
}
