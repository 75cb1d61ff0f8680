// Reading vLLM's prompt echo as the JSON sent gives what JSON.parse gives, in every shape an
// answer may take: the echo as sent, drifted, spaced, duplicated, quoted inside a string, absent.
import { describe, expect, it } from "vitest";
import { parseEchoing } from "../../src/llm/prompt-echo.ts";

const IDS = [151644, 8948, 198, 0, 42];
const JSON_IDS = JSON.stringify(IDS);

function answer(echo: string, before = "", after = ""): string {
  return `{"id":"cmpl-1","choices":[{"index":0,"text":"hi${before}","token_ids":[7,8],"prompt_token_ids":${echo}${after}}],"usage":null}`;
}

describe("parseEchoing", () => {
  const cases: [string, string][] = [
    ["the echo as sent", answer(JSON_IDS)],
    ["a drifted echo", answer("[151644,8948,198,0,43]")],
    ["a longer echo", answer("[151644,8948,198,0,42,1]")],
    ["a spaced echo", answer("[151644, 8948, 198, 0, 42]")],
    ["no echo", answer("null")],
    ["an echo then a duplicate key", answer(JSON_IDS, "", ',"prompt_token_ids":[1]')],
    ["an escaped duplicate key after it", answer(JSON_IDS, "", ',"prompt\\u005ftoken_ids":[1]')],
    ["the key quoted inside the text", answer("[1]", '\\"prompt_token_ids\\":[151644,8948,198,0,42]')],
    ["the echo in another choice", `{"choices":[{"text":"a"},{"prompt_token_ids":${JSON_IDS}}]}`],
    ["no choices", `{"prompt_token_ids":${JSON_IDS}}`],
    ["a key ending in the name", `{"choices":[{"x\\"prompt_token_ids":${JSON_IDS}}]}`],
  ];
  for (const [name, text] of cases)
    it(`is JSON.parse's value: ${name}`, () => {
      expect(parseEchoing(text, JSON_IDS, IDS)).toEqual(JSON.parse(text));
    });

  it("reads the echo as sent as the very ids sent, without parsing them again", () => {
    const parsed = parseEchoing(answer(JSON_IDS), JSON_IDS, IDS) as {
      choices: { prompt_token_ids: unknown }[];
    };
    expect(parsed.choices[0].prompt_token_ids).toBe(IDS);
  });

  it("is undefined for text that is not JSON, also around an echo as sent", () => {
    expect(parseEchoing(answer(JSON_IDS).slice(0, -1), JSON_IDS, IDS)).toBeUndefined();
    expect(parseEchoing(`{"a":"b"prompt_token_ids":${JSON_IDS}}`, JSON_IDS, IDS)).toBeUndefined();
    expect(parseEchoing("not json", JSON_IDS, IDS)).toBeUndefined();
    expect(parseEchoing("", JSON_IDS, IDS)).toBeNull();
  });
});
