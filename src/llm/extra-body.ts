// What `rollgym.llm.extra_body` may hold and what of it reaches which request: fields rollgym
// sets on every request are refused (merged last, a copy would override the value fitted for
// the turn), and fields that change the chat template's rendering go to count and render
// requests too, or counts come out lower than the prompt the chat route renders.
import { SAMPLING, type SamplingField } from "../../protocol/settings.ts";
import type { Dialect } from "./engine.ts";
import { LLAMACPP_NAMES } from "./generation.ts";

/** The config key that sets a sampling field (and its val_kwargs key, in val mode). */
function samplingKey(name: SamplingField): string {
  const { key, val } = SAMPLING[name]["x-config"];
  const valKey = val ? ` (${val.key.replace("actor_rollout_ref.rollout.", "")} in val mode)` : "";
  const lowered = name === "max_tokens" ? " (lowered per turn to fit the context window)" : "";
  return `${key}${valKey}${lowered}`;
}

/** Other spellings of a sampling field in the engines' request bodies. */
const ENGINE_SPELLINGS: Readonly<Record<string, SamplingField>> = {
  max_completion_tokens: "max_tokens",
  n_predict: "max_tokens",
  ...Object.fromEntries(Object.entries(LLAMACPP_NAMES).map(([name, spelling]) => [spelling, name])),
};

/** Request fields rollgym sets on every request, with the config key that sets them. */
const OWNED_FIELDS: Readonly<Record<string, string>> = {
  ...Object.fromEntries(
    [
      ...(Object.keys(SAMPLING) as SamplingField[]).map((name) => [name, name] as const),
      ...Object.entries(ENGINE_SPELLINGS),
    ].map(([field, name]) => [field, samplingKey(name)]),
  ),
  seed: "rollgym.seed (each request's seed derives from it) or rollgym.llm.request_seeds=false",
  n: "es_manager.<mode>.group_size (each request asks for one answer)",
  model: "rollgym.llm.model",
  messages: "the episode (its prompt is built from the history)",
  prompt: "the episode (its prompt is built from the history)",
  continue_final_message: "rollgym.llm.prefill",
  add_generation_prompt: "rollgym.llm.prefill",
  stream: "nothing: rollgym reads whole answers",
};

/** The first extra_body key rollgym sets itself, with why and the key to use instead; null when none. */
export function extraBodyProblem(
  extraBody: Readonly<Record<string, unknown>>,
): { key: string; reason: string } | null {
  for (const key of Object.keys(extraBody)) {
    const instead = OWNED_FIELDS[key];
    if (instead !== undefined)
      return {
        key: `rollgym.llm.extra_body.${key}`,
        reason: `rollgym sets ${key} on every request and an extra_body copy would override it; set it with ${instead}`,
      };
  }
  return null;
}

/** What is merged into every generation request last: the extra body, and `seed: null` when request seeds are off. */
export function requestExtras(
  extraBody: Readonly<Record<string, unknown>>,
  requestSeeds: boolean,
): Record<string, unknown> {
  return { ...extraBody, ...(requestSeeds ? {} : { seed: null }) };
}

/** Extra-body fields that change how the chat template renders the prompt. */
const RENDERING_FIELDS = new Set([
  "chat_template",
  "chat_template_kwargs",
  "tools",
  "documents",
  "add_special_tokens",
  "reasoning_effort",
  "mm_processor_kwargs",
]);

/**
 * The extra body's rendering fields, for count and render requests in `dialect`. vLLM's
 * /tokenize takes no `documents` or `reasoning_effort`, but its chat route hands both to the
 * template merged with chat_template_kwargs (which win), so for vLLM they travel inside
 * chat_template_kwargs and render the same.
 */
export function renderingFields(
  extraBody: Readonly<Record<string, unknown>>,
  dialect: Dialect,
): Record<string, unknown> {
  const fields = Object.fromEntries(Object.entries(extraBody).filter(([key]) => RENDERING_FIELDS.has(key)));
  if (dialect !== "vllm") return fields;
  const { documents, reasoning_effort, ...rest } = fields;
  if (documents === undefined && reasoning_effort === undefined) return fields;
  const kwargs = typeof rest.chat_template_kwargs === "object" ? rest.chat_template_kwargs : {};
  return {
    ...rest,
    chat_template_kwargs: {
      ...(documents !== undefined ? { documents } : {}),
      ...(reasoning_effort !== undefined ? { reasoning_effort } : {}),
      ...kwargs,
    },
  };
}
