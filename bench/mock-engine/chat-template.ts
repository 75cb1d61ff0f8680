// A tiny Qwen-style chat template (ChatML), as vLLM would render it through the HF template:
//   <|im_start|>{role}\n{content}<|im_end|>\n … [<|im_start|>assistant\n]

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
}

export function renderChat(messages: readonly TemplateMessage[], options: TemplateOptions): string {
  let out = "";
  const last = messages.length - 1;
  for (let i = 0; i <= last; i++) {
    const { role, content } = messages[i];
    out += `<|im_start|>${role}\n${content}`;
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
