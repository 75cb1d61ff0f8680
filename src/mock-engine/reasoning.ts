// vLLM's `--reasoning-parser` for non-streaming chat: how the generated text (output.text, after
// stop strings and special tokens) is split into `message.reasoning` and `message.content`.
// Both parsers at upstream 22720624 work on the string alone, never on the prompt, so an
// assistant prefill "<think>" in the prompt changes nothing. Findings: vllm-reasoning.md.
import { pyTruthy } from "./errors.ts";

export type ReasoningParserName = "qwen3" | "deepseek_r1";

export const REASONING_PARSERS: readonly ReasoningParserName[] = ["qwen3", "deepseek_r1"];

export interface ReasoningSplit {
  reasoning: string | null;
  content: string | null;
}

const START = "<think>";
const END = "</think>";
const TOOL_CALL = "<tool_call>";

/** Python's str.partition: [before, separator found, after]. */
function partition(text: string, sep: string): [string, boolean, string] {
  const at = text.indexOf(sep);
  return at < 0 ? [text, false, ""] : [text.slice(0, at), true, text.slice(at + sep.length)];
}

/**
 * ReasoningParser.extract_reasoning, then serving.py:1130 (`include_reasoning: false` drops the
 * reasoning only). `templateKwargs` is the request's chat_template_kwargs; only qwen3 reads it.
 */
export function splitReasoning(
  parser: ReasoningParserName,
  text: string,
  templateKwargs: Readonly<Record<string, unknown>>,
  includeReasoning: boolean,
): ReasoningSplit {
  const split = extract(parser, text, templateKwargs);
  return includeReasoning ? split : { reasoning: null, content: split.content };
}

function extract(
  parser: ReasoningParserName,
  text: string,
  templateKwargs: Readonly<Record<string, unknown>>,
): ReasoningSplit {
  // Both drop everything up to and including the first "<think>" (basic_parsers.py:168-171,
  // qwen3_reasoning_parser.py:137-140).
  const [before, hasStart, after] = partition(text, START);
  const output = hasStart ? after : before;
  const [reasoning, hasEnd, content] = partition(output, END);
  // Split at the first "</think>"; an empty rest is null content.
  if (hasEnd) return { reasoning, content: content === "" ? null : content };
  if (parser === "deepseek_r1") return { reasoning: output, content: null }; // basic_parsers.py:175-176
  // qwen3: `chat_template_kwargs.get("enable_thinking", True)` used as a truth value (:43-46).
  const enable = "enable_thinking" in templateKwargs ? templateKwargs.enable_thinking : true;
  if (!pyTruthy(enable)) return { reasoning: null, content: output }; // :146-148
  const toolCall = output.indexOf(TOOL_CALL); // :150-155, a string search
  if (toolCall >= 0) {
    const r = output.slice(0, toolCall);
    const c = output.slice(toolCall);
    return { reasoning: r === "" ? null : r, content: c === "" ? null : c };
  }
  return { reasoning: output, content: null }; // :156-158: truncated, all reasoning
}
