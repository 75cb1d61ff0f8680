// vLLM's `--generation-config auto`: sampling defaults read from the model's
// generation_config.json fill the request fields the client left out (or sent as null).
//
// At upstream 22720624: ModelConfig.get_diff_sampling_param (vllm/config/model.py:1465-1516)
// keeps repetition_penalty, temperature, top_k, top_p, min_p and max_new_tokens (as
// max_tokens); {Chat,}CompletionRequest.to_sampling_params (chat_completion/protocol.py:537-563,
// completion/protocol.py:242-271) take each of the first five from it when the request field
// is None, else the built-in 1.0 / 1.0 / 0 / 0.0 / 1.0; get_max_tokens (entrypoints/utils.py:
// 175-211) uses max_tokens when the request has none (chat; completions default to 16). presence_penalty and frequency_penalty default to 0.0 in the request models
// there and are never filled; they are accepted here for later vLLM, where those fields
// default to null and take the server default (facts §1.1), so a test can cover both.

export interface GenerationConfig {
  temperature?: number;
  top_p?: number;
  top_k?: number;
  min_p?: number;
  repetition_penalty?: number;
  presence_penalty?: number;
  frequency_penalty?: number;
  /** Caps chat's max_tokens when the request sends neither max_tokens nor max_completion_tokens. */
  max_new_tokens?: number;
}

const GENERATION_CONFIG_FIELDS = [
  "temperature",
  "top_p",
  "top_k",
  "min_p",
  "repetition_penalty",
  "presence_penalty",
  "frequency_penalty",
  "max_new_tokens",
] as const;

export type GenerationConfigField = (typeof GENERATION_CONFIG_FIELDS)[number];

/** The request fields a default can fill; max_new_tokens shows up as max_tokens. */
export type DefaultedField = Exclude<GenerationConfigField, "max_new_tokens"> | "max_tokens";

export const DEFAULTED_FIELDS: readonly DefaultedField[] = GENERATION_CONFIG_FIELDS.map((field) =>
  field === "max_new_tokens" ? "max_tokens" : field,
);

/** Checks a config given as an option or as --generation-config JSON; throws RangeError. */
export function checkGenerationConfig(value: unknown): GenerationConfig {
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw new RangeError("generationConfig must be an object");
  const out: GenerationConfig = {};
  for (const [key, v] of Object.entries(value)) {
    if (!(GENERATION_CONFIG_FIELDS as readonly string[]).includes(key))
      throw new RangeError(
        `generationConfig: unknown field ${JSON.stringify(key)}; allowed: ${GENERATION_CONFIG_FIELDS.join(", ")}`,
      );
    // null is how generation_config.json says "not set" (vLLM drops None values).
    if (v === null || v === undefined) continue;
    if (typeof v !== "number" || !Number.isFinite(v))
      throw new RangeError(`generationConfig.${key} must be a finite number, got ${JSON.stringify(v)}`);
    if ((key === "top_k" || key === "max_new_tokens") && !Number.isInteger(v))
      throw new RangeError(`generationConfig.${key} must be an integer, got ${v}`);
    out[key as GenerationConfigField] = v;
  }
  return out;
}

/** The sampling fields a generation config can fill, as the request sent them (validate.ts). */
export interface DefaultableSampling {
  /** As requested; null when the client left it out (chat) or sent null. */
  maxTokens: number | null;
  // Null: left out or JSON null, so the server default (generation config) applies.
  temperature: number | null;
  topP: number | null;
  topK: number | null;
  minP: number | null;
  repetitionPenalty: number | null;
  presencePenalty: number | null;
  frequencyPenalty: number | null;
}

export type RequestedSampling = { kind: "chat" | "completion" } & DefaultableSampling;

export interface EffectiveSampling {
  temperature: number;
  topP: number;
  topK: number;
  minP: number;
  repetitionPenalty: number;
  presencePenalty: number;
  frequencyPenalty: number;
  /** get_max_tokens' fallback when the request set no max_tokens. */
  maxTokensDefault: number | null;
  /** Request fields that took a server default, in DEFAULTED_FIELDS order. */
  applied: DefaultedField[];
}

export function applyGenerationConfig(req: RequestedSampling, config: GenerationConfig): EffectiveSampling {
  const applied: DefaultedField[] = [];
  const pick = (field: DefaultedField, sent: number | null, server: number | undefined, builtin: number) => {
    if (sent !== null) return sent;
    if (server === undefined) return builtin;
    applied.push(field);
    return server;
  };
  const temperature = pick("temperature", req.temperature, config.temperature, 1.0);
  const topP = pick("top_p", req.topP, config.top_p, 1.0);
  const topK = pick("top_k", req.topK, config.top_k, 0);
  const minP = pick("min_p", req.minP, config.min_p, 0.0);
  const repetitionPenalty = pick("repetition_penalty", req.repetitionPenalty, config.repetition_penalty, 1.0);
  const presencePenalty = pick("presence_penalty", req.presencePenalty, config.presence_penalty, 0.0);
  const frequencyPenalty = pick("frequency_penalty", req.frequencyPenalty, config.frequency_penalty, 0.0);
  let maxTokensDefault: number | null = null;
  // Completions default max_tokens to 16, so only an explicit null gets here (and then fails).
  if (req.maxTokens === null && config.max_new_tokens !== undefined) {
    maxTokensDefault = config.max_new_tokens;
    applied.push("max_tokens");
  }
  return {
    temperature,
    topP,
    topK,
    minP,
    repetitionPenalty,
    presencePenalty,
    frequencyPenalty,
    maxTokensDefault,
    applied,
  };
}
