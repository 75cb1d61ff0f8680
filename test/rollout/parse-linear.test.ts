// The response parser searches in linear time, and finds exactly what Python's lazy DOTALL
// regexes find (checked against the same regexes run by JavaScript's backtracking engine on
// generated texts made of tag fragments, where the two engines agree).
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { parseResponse, searchAnswer, searchThinkAnswer } from "../../src/rollout/parse.ts";
import { PY_SPACE_CLASS } from "../../src/rollout/pytext.ts";

const THINK_RE = new RegExp(`<think>([\\s\\S]*?)</think>${PY_SPACE_CLASS}*<answer>([\\s\\S]*?)</answer>`);
const ANSWER_RE = /<answer>([\s\S]*?)<\/answer>/;

// Tags and tag pairs often enough that most texts match, some in several ways.
const piece = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom("<think>", "</think>", "<answer>", "</answer>") },
  {
    weight: 3,
    arbitrary: fc.constantFrom("</think><answer>", "</think> \n<answer>", "</think>\u3000<answer>"),
  },
  { weight: 2, arbitrary: fc.constantFrom(" ", "\n", "Up", " || ", "Left", "x", "<", "think>", "/answer>") },
);
const text = fc.array(piece, { maxLength: 12 }).map((parts) => parts.join(""));

describe("parseResponse search", () => {
  it("matches the regex on 5,000 generated responses, with and without think", () => {
    fc.assert(
      fc.property(text, (response) => {
        const m = THINK_RE.exec(response);
        expect(searchThinkAnswer(response)).toEqual(m === null ? null : [m[1], m[2]]);
        const a = ANSWER_RE.exec(response);
        expect(searchAnswer(response)).toEqual(a === null ? null : a[1]);
        const got = parseResponse(response, { think: true });
        expect(got.matched).toBe(m !== null);
        if (m === null) expect(got.llmResponse).toBe(response);
      }),
      { numRuns: 5000 },
    );
  });

  it("parses the quadratic-backtracking attack (1 MB of </think><think>) and a 1 MB whitespace run", () => {
    const attack = `<think>${"</think><think>".repeat(70_000)}`;
    expect(parseResponse(attack, { think: true }).matched).toBe(false);
    const spaces = `<think>a</think>${" ".repeat(1_000_000)}x<answer>Up</answer>`;
    expect(parseResponse(spaces, { think: true }).matched).toBe(false);
    const wide = `<think>${" ".repeat(1_000_000)}a${" ".repeat(1_000_000)}</think><answer>Up</answer>`;
    expect(parseResponse(wide, { think: true })).toMatchObject({ matched: true, parsed: ["Up"] });
  });
});
