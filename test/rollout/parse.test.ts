import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { mapActions, parseResponse } from "../../src/rollout/parse.ts";

// Produced by test/fixtures/parse/gen_ragen_parse.py, which runs RAGEN's own
// ContextManager._parse_response and EnvStateManager._extract_map_valid_actions (+ the
// format-penalty test in step()) from a RAGEN checkout (20daedc) on generated turns.
interface ParseCase {
  text: string;
  think: boolean;
  actionSep: string;
  maxActionsPerTurn: number;
  llmResponse: string;
  parsed: string[];
  matched: boolean;
  actionNames: string[];
  ids: number[];
  names: string[];
  formatPenalty: boolean;
}
const cases: ParseCase[] = readFileSync(
  new URL("../fixtures/parse/ragen-parse.jsonl", import.meta.url),
  "utf8",
)
  .split("\n")
  .filter((l) => l.length > 0)
  .map((l) => JSON.parse(l) as ParseCase);

const SOKOBAN = ["Up", "Down", "Left", "Right"];

describe("parseResponse", () => {
  it("think: rebuilds tags, drops text after </answer>", () => {
    expect(
      parseResponse("<think>box is left</think>\n<answer>Left || Up</answer> extra", { think: true }),
    ).toEqual({
      parsed: ["Left", "Up"],
      llmResponse: "<think>box is left</think><answer>Left || Up</answer>",
      matched: true,
    });
  });

  it("keeps the answer as written unless actions were cut", () => {
    expect(parseResponse("<answer>Up||Left</answer>", { think: false }).llmResponse).toBe(
      "<answer>Up||Left</answer>",
    );
    const cut = parseResponse("<answer>Up||Left||Down</answer>", { think: false });
    expect(cut.parsed).toEqual(["Up", "Left"]);
    expect(cut.llmResponse).toBe("<answer>Up || Left</answer>");
  });

  it("no match returns the raw text and no actions", () => {
    const raw = "<think>hmm</think> I go <answer>Up";
    expect(parseResponse(raw, { think: true })).toEqual({ parsed: [], llmResponse: raw, matched: false });
    // the gap between </think> and <answer> is Python \s: U+FEFF is not in it
    expect(parseResponse("<think>a</think>\ufeff<answer>Up</answer>", { think: true }).matched).toBe(false);
    expect(parseResponse("<think>a</think>\x1c\x85<answer>Up</answer>", { think: true }).matched).toBe(true);
  });

  it("strips with Python's whitespace and removes special strings", () => {
    const r = parseResponse("<answer>\ufeffUp\x85 ||<|im_end|> Left\u3000||</answer>", {
      think: false,
      maxActionsPerTurn: 3,
    });
    expect(r.parsed).toEqual(["\ufeffUp", "Left"]);
    expect(r.llmResponse).toBe("<answer>\ufeffUp\x85 || Left\u3000||</answer>");
  });

  it("custom separator and max actions", () => {
    const r = parseResponse("<answer>a, b ,c,,d</answer>", {
      think: false,
      actionSep: ",",
      maxActionsPerTurn: 3,
    });
    expect(r).toEqual({ parsed: ["a", "b", "c"], llmResponse: "<answer>a , b , c</answer>", matched: true });
  });

  it("rejects invalid options", () => {
    expect(() => parseResponse("<answer>Up</answer>", { think: false, actionSep: "" })).toThrow(/actionSep/);
    expect(() => parseResponse("<answer>Up</answer>", { think: false, maxActionsPerTurn: 1.5 })).toThrow(
      /maxActionsPerTurn/,
    );
  });
});

describe("mapActions", () => {
  it("exact match after lower-casing, no fuzzy matching", () => {
    expect(mapActions(["UP", "left"], SOKOBAN)).toEqual({
      ids: [1, 3],
      names: ["Up", "Left"],
      formatPenalty: false,
    });
    expect(mapActions(["Up.", "Down", "move up", "1"], SOKOBAN)).toEqual({
      ids: [2],
      names: ["Down"],
      formatPenalty: true,
    });
  });

  it("one penalty when nothing parsed or nothing mapped", () => {
    expect(mapActions([], SOKOBAN).formatPenalty).toBe(true);
    expect(mapActions(["jump"], SOKOBAN)).toEqual({ ids: [], names: [], formatPenalty: true });
  });

  it("later names win lower-case collisions; Python lower-casing", () => {
    expect(mapActions(["up"], ["Up", "UP"]).ids).toEqual([2]);
    expect(mapActions(["STRASSE", "ΣTOP"], ["strasse", "σtop"]).ids).toEqual([1, 2]);
  });
});

describe("parity with RAGEN's parser on generated turns", () => {
  it("covers the intended mix", () => {
    expect(cases.length).toBeGreaterThanOrEqual(2000);
    for (const think of [true, false]) {
      for (const max of [1, 2, 3]) {
        expect(cases.some((c) => c.think === think && c.maxActionsPerTurn === max)).toBe(true);
      }
    }
    expect(cases.filter((c) => c.matched).length).toBeGreaterThan(1000);
    expect(cases.filter((c) => !c.matched).length).toBeGreaterThan(300);
    expect(cases.filter((c) => !c.formatPenalty).length).toBeGreaterThan(200);
    expect(cases.filter((c) => c.actionSep !== "||").length).toBeGreaterThan(500);
  });

  it("parseResponse and mapActions equal RAGEN on every case", () => {
    const mismatches: string[] = [];
    for (const [i, c] of cases.entries()) {
      const r = parseResponse(c.text, {
        think: c.think,
        actionSep: c.actionSep,
        maxActionsPerTurn: c.maxActionsPerTurn,
      });
      const m = mapActions(r.parsed, c.actionNames);
      const got = { ...r, ids: m.ids, names: m.names, formatPenalty: m.formatPenalty };
      const want = {
        parsed: c.parsed,
        llmResponse: c.llmResponse,
        matched: c.matched,
        ids: c.ids,
        names: c.names,
        formatPenalty: c.formatPenalty,
      };
      if (JSON.stringify(got) !== JSON.stringify(want)) mismatches.push(`#${i} ${JSON.stringify(c.text)}`);
    }
    expect(mismatches).toEqual([]);
  });
});
