// RAGEN's hard truncation (`truncation=ragen`) checked against RAGEN's own code.
//
// How test/fixtures/ragen/truncation.json was made (outside this repo; no RAGEN code is here):
// 1. Histories: a Node script played CoordSokoban val episodes (seeds 500–507, 510–517, …,
//    540–547; max_turn 10, max_actions_per_turn 1) through rollgym's runBatch with the built-in
//    random and oracle policies, with and without think, with `noise`/`malformed` set and a
//    wrapper that sometimes returns rambling text or text without any tags, so lengths vary
//    and some turns carry the invalid-action warning. It recorded Episode.promptMessages() of
//    every turn; each turn's prompt is a prefix of the last prompt, so one history per
//    episode is stored: the last prompt plus the last rebuilt response (40 histories of 2–10
//    turns). 12 short synthetic histories follow them for the edge cases (stray roles,
//    "reward" in lower case, "Reward" inside a word, a first message that is not a system
//    message, nothing to drop).
// 2. A Python harness loaded ragen/llm_agent/ctx_manager.py from mll-lab-nu/RAGEN @20daedc
//    unchanged (torch, verl, transformers, hydra, tensordict, ragen.env and the memory module
//    replaced by empty modules) and called ContextManager._apply_max_length unbound on a
//    `self` holding only config.actor_rollout_ref.rollout.max_model_len and a tokenizer shim.
//    The shim renders Qwen2.5's ChatML ("<|im_start|>{role}\n{content}<|im_end|>\n" per
//    message, "<|im_start|>assistant\n" as generation prompt) and counts the matches of
//    TOKEN below (fixture.tokenizer.tokens is the same pattern).
// 3. Cases: every prefix of a realistic history, ending in a user message (inference prompt,
//    add_generation_prompt=True) or in an assistant message (training sequence, False); each
//    synthetic history whole, with both flags. For each, RAGEN ran once with max_model_len 0
//    to log every count it computes on the way down, then with max_model_len = 0, each logged
//    count, each logged count − 1 and the full count + 50, which puts a limit on both sides of
//    every cut. Recorded: how many messages RAGEN returned (always the first message plus a
//    tail, which the harness asserted), the assistant messages it dropped, and its last count.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import type { ChatMessage } from "../../src/llm/chat.ts";
import { ragenTruncate } from "../../src/rollout/ragen-truncation.ts";

interface Fixture {
  ragen_commit: string;
  tokenizer: { template: string; tokens: string };
  realisticHistories: number;
  caseFields: string[];
  histories: ChatMessage[][];
  /** [history, messages, generationPrompt, maxModelLen, kept, droppedTurns, tokens] */
  cases: [number, number, boolean, number, number, number, number][];
}

const fixture = JSON.parse(
  readFileSync(new URL("../fixtures/ragen/truncation.json", import.meta.url), "utf8"),
) as Fixture;

// The shim's token rule: special markers, ASCII word runs, whitespace runs, any other code point.
const TOKEN = /<\|im_start\|>|<\|im_end\|>|[A-Za-z0-9_]+|[ \t\n\r\f\v]+|[^A-Za-z0-9_ \t\n\r\f\v]/gu;

function chatml(messages: readonly ChatMessage[], generationPrompt: boolean): string {
  const text = messages.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join("");
  return generationPrompt ? `${text}<|im_start|>assistant\n` : text;
}

function shimCount(generationPrompt: boolean): (messages: readonly ChatMessage[]) => number {
  return (messages) => chatml(messages, generationPrompt).match(TOKEN)?.length ?? 0;
}

describe("ragenTruncate against RAGEN's _apply_max_length", () => {
  it("uses the fixture's token rule and field order", () => {
    expect(fixture.tokenizer.tokens).toBe(TOKEN.source);
    expect(fixture.caseFields).toEqual([
      "history",
      "messages",
      "generationPrompt",
      "maxModelLen",
      "kept",
      "droppedTurns",
      "tokens",
    ]);
    // Every character is in some token, so the count is a partition of the text.
    const text = chatml(fixture.histories[0], true);
    expect(text.match(TOKEN)?.join("")).toBe(text);
  });

  it("covers no cut, one, several and every cut, on inference and training shapes", () => {
    const realistic = fixture.cases.filter(([h]) => h < fixture.realisticHistories);
    expect(fixture.cases.length).toBeGreaterThanOrEqual(200);
    for (const gen of [true, false]) {
      const shape = realistic.filter((c) => c[2] === gen);
      expect(shape.some((c) => c[5] === 0)).toBe(true);
      expect(shape.some((c) => c[5] === 1)).toBe(true);
      expect(shape.some((c) => c[5] >= 5)).toBe(true);
      // Cut down to what RAGEN cannot cut further, and still too long.
      expect(shape.some((c) => c[6] > c[3] && c[4] < c[1])).toBe(true);
    }
  });

  fixture.histories.forEach((history, h) => {
    const label = h < fixture.realisticHistories ? `history ${h}` : `synthetic history ${h}`;
    it(`${label}: same kept messages, dropped turns and final count as RAGEN`, async () => {
      const cases = fixture.cases.filter((c) => c[0] === h);
      expect(cases.length).toBeGreaterThan(0);
      for (const [, length, gen, maxModelLen, kept, droppedTurns, tokens] of cases) {
        const input = history.slice(0, length);
        const before = structuredClone(input);
        const count = shimCount(gen);
        const result = await ragenTruncate(input, count, maxModelLen);
        const where = `history ${h}, ${length} messages, generation prompt ${gen}, max_model_len ${maxModelLen}`;
        expect(result.messages, where).toEqual([input[0], ...input.slice(length - kept + 1)]);
        expect(result.droppedTurns, where).toBe(droppedTurns);
        expect(count(result.messages), where).toBe(tokens);
        expect(input, where).toEqual(before);
      }
    });
  });
});

describe("ragenTruncate", () => {
  const system: ChatMessage = { role: "system", content: "sys" };
  const user = (content: string): ChatMessage => ({ role: "user", content });
  const assistant = (content: string): ChatMessage => ({ role: "assistant", content });
  const byMessages = (messages: readonly ChatMessage[]) => messages.length;

  it("awaits an async counter and returns a fitting list unchanged (as a copy)", async () => {
    const messages = [system, user("Turn 1"), assistant("a1"), user("Reward:\n0\nTurn 2")];
    const result = await ragenTruncate(messages, async (m) => m.length, 4);
    expect(result).toEqual({ messages, droppedTurns: 0 });
    expect(result.messages).not.toBe(messages);
    expect(await ragenTruncate([], byMessages, 0)).toEqual({ messages: [], droppedTurns: 0 });
  });

  it("on an even turn, cuts the current turn's state too and leaves the system prompt alone", async () => {
    const turn4 = [
      system,
      user("Turn 1"),
      assistant("a1"),
      user("Reward:\n-0.1\nTurn 2"),
      assistant("a2"),
      user("Reward:\n-0.1\nTurn 3"),
      assistant("a3"),
      user("Reward:\n-0.1\nTurn 4"),
    ];
    // Limit 4 messages: the first cut (user, assistant, Reward-user) leaves [a2, u3, a3, u4].
    expect(await ragenTruncate(turn4, byMessages, 5)).toEqual({
      messages: [
        system,
        assistant("a2"),
        user("Reward:\n-0.1\nTurn 3"),
        assistant("a3"),
        user("Reward:\n-0.1\nTurn 4"),
      ],
      droppedTurns: 1,
    });
    // Limit 3: the stray assistant goes, then [u3, a3, u4] goes as one unit.
    expect(await ragenTruncate(turn4, byMessages, 3)).toEqual({ messages: [system], droppedTurns: 3 });
    // An odd turn stops at [a(n-1), u(n)] after one cut: two messages are never cut.
    expect(await ragenTruncate(turn4.slice(0, 6), byMessages, 1)).toEqual({
      messages: [system, assistant("a2"), user("Reward:\n-0.1\nTurn 3")],
      droppedTurns: 1,
    });
  });
});
