// Prompt text as RAGEN's context manager writes it: the system message (instruction, symbol
// meanings, action list) and the per-turn user block.
import type { ResolvedTag } from "../../envs/registry.ts";
import type { ChatMessage } from "../llm/chat.ts";

export interface PromptOptions {
  /** RAGEN's enable_think: ask for <think>…</think><answer>…</answer>. */
  think: boolean;
  /** RAGEN's agent_proxy.action_sep. */
  actionSep?: string;
  /**
   * Compatibility: print the env type's default symbols and actions, as RAGEN does, instead of
   * the tag's own (differs only for tags that change grid_vocab or action_lookup).
   */
  ragenDefaultVocabulary?: boolean;
}

export const DEFAULT_ACTION_SEP = "||";

/**
 * Each tag's system prompts, by the options they depend on: every episode of a tag shares one
 * string instead of holding a copy of its own (1.6 KiB for Sokoban, at 10,240 in flight 16 MiB).
 */
const systemPrompts = new WeakMap<ResolvedTag, Map<string, string>>();

export function systemPrompt(tag: ResolvedTag, options: PromptOptions): string {
  let prompts = systemPrompts.get(tag);
  if (prompts === undefined) {
    prompts = new Map();
    systemPrompts.set(tag, prompts);
  }
  const key = `${options.ragenDefaultVocabulary === true}${options.actionSep ?? DEFAULT_ACTION_SEP}`;
  let prompt = prompts.get(key);
  if (prompt === undefined) {
    prompt = composeSystemPrompt(tag, options);
    prompts.set(key, prompt);
  }
  return prompt;
}

function composeSystemPrompt(tag: ResolvedTag, options: PromptOptions): string {
  const vocabulary = tag.type.vocabulary(options.ragenDefaultVocabulary ? tag.type.defaults() : tag.config);
  let instruction = tag.spec.env_instruction;
  // RAGEN reads observation_format from the config defaults ("grid"), so the symbol list is
  // printed for every tag that has one, grid_coord tags included.
  if (vocabulary.gridVocab) {
    const pairs = Object.entries(vocabulary.gridVocab).map(([symbol, meaning]) => `${symbol}: ${meaning}`);
    instruction += `\nThe meaning of each symbol in the state is:\n${pairs.join(", ")}`;
  }
  if (vocabulary.actionNames) {
    const sep = options.actionSep ?? DEFAULT_ACTION_SEP;
    instruction +=
      `\nYour available actions are:\n${vocabulary.actionNames.join(", ")}` +
      `\nYou can make up to ${tag.spec.max_actions_per_traj} actions, separated by the action separator " ${sep} "\n`;
  }
  return `You're a helpful assistant. ${instruction}`;
}

export function formatInstruction(think: boolean): string {
  return think
    ? "<think> [Your thoughts] </think> <answer> [your answer] </answer>"
    : "<answer> [your answer] </answer>";
}

export const INVALID_ACTION_WARNING =
  "No valid action provided previously. Environment state remains the same. Please try again.\n";

export interface TurnBlock {
  turn: number;
  state: string;
  actionsLeft: number;
  maxTokens: number;
  think: boolean;
  /** Inference prompts only: the previous turn had no valid action. */
  warnInvalid?: boolean;
}

export function turnBlock(block: TurnBlock): string {
  const warning = block.warnInvalid ? INVALID_ACTION_WARNING : "";
  return (
    `\nTurn ${block.turn}:\nState:\n${block.state}\n${warning}` +
    `You have ${block.actionsLeft} actions left. Always output: ${formatInstruction(block.think)} ` +
    `with no extra text. Strictly follow this format. Max response length: ${block.maxTokens} words (tokens).\n`
  );
}

/** The first turn's system and user messages, before any chat template. */
export function firstTurnMessages(
  tag: ResolvedTag,
  observation: string,
  options: PromptOptions,
): ChatMessage[] {
  return [
    { role: "system", content: systemPrompt(tag, options) },
    {
      role: "user",
      content: turnBlock({
        turn: 1,
        state: observation,
        actionsLeft: tag.spec.max_actions_per_traj,
        maxTokens: tag.spec.max_tokens,
        think: options.think,
      }),
    },
  ];
}
