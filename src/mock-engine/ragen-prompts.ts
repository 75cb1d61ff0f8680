// RAGEN conversations for the tokenizer's tests and speed bench: every catalogue tag, a few
// seeds, each turn answered by the mock's own policy and stepped in the real environment, so
// the text is exactly what a RAGEN rollout sends (prompts from src/rollout/prompt.ts).
import { createRegistry } from "../../envs/catalog.ts";
import type { ChatMessage } from "../llm/chat.ts";
import { firstTurnMessages, turnBlock } from "../rollout/prompt.ts";
import { answerPrompt } from "./answer.ts";
import { renderChat } from "./chat-template.ts";
import { Rng } from "./rng.ts";

export interface RagenConversation {
  tag: string;
  seed: number;
  /** System, then user / assistant turns; ends with a user turn. */
  messages: ChatMessage[];
  /** The assistant answers in order (the mock policy's, as generated). */
  answers: string[];
}

/** `turns` user turns per conversation (the last one unanswered), for `seeds` seeds per tag. */
export function ragenConversations(options: {
  seeds: number;
  turns: number;
  think?: boolean;
}): RagenConversation[] {
  const think = options.think ?? true;
  const registry = createRegistry();
  const out: RagenConversation[] = [];
  for (const tagName of registry.tagNames()) {
    const tag = registry.tag(tagName);
    for (let seed = 0; seed < options.seeds; seed++) {
      const env = tag.make();
      const messages = firstTurnMessages(tag, env.reset(seed), { think });
      const answers: string[] = [];
      const rng = new Rng(seed + 1);
      let left = tag.spec.max_actions_per_traj;
      for (let turn = 2; turn <= options.turns && left > 1; turn++) {
        const prompt = renderChat(messages, { addGenerationPrompt: true, continueFinalMessage: false });
        const answer = answerPrompt(prompt, rng, { answerActions: 1 });
        answers.push(answer.text);
        messages.push({ role: "assistant", content: answer.text });
        const action = env.actionNames.indexOf(answer.actions[0]) + 1;
        const step = env.step(action > 0 ? action : 1);
        left--;
        if (step.terminated || step.truncated) break;
        messages.push({
          role: "user",
          content: turnBlock({ turn, state: step.observation, actionsLeft: left, maxTokens: 100, think }),
        });
      }
      if (messages[messages.length - 1].role === "assistant") messages.pop();
      out.push({ tag: tagName, seed, messages, answers });
    }
  }
  return out;
}
