// Reading vLLM's prompt echo as the JSON sent gives what JSON.parse gives, in every shape an
// answer may take: the echo as sent, drifted, spaced, duplicated, quoted inside a string, absent;
// and the first choice's logprobs without the per-token fields token mode never reads.
import { describe, expect, it } from "vitest";
import { parseEchoing as parseEchoingBytes } from "../../src/llm/prompt-echo.ts";

/** The answer's bytes, as they come off the socket. */
function parseEchoing(text: string, json: string, ids: readonly number[]): unknown {
  return parseEchoingBytes(Buffer.from(text), json, ids);
}

const IDS = [151644, 8948, 198, 0, 42];
const JSON_IDS = JSON.stringify(IDS);

function answer(echo: string, before = "", after = ""): string {
  return `{"id":"cmpl-1","choices":[{"index":0,"text":"hi${before}","token_ids":[7,8],"prompt_token_ids":${echo}${after}}],"usage":null}`;
}

/** vLLM's logprobs for two tokens, with text that needs escaping in tokens and keys. */
const LOGPROBS =
  '{"text_offset":[0,3],"token_logprobs":[-0.5,null],"tokens":["a\\"]\\\\","}{,"],"top_logprobs":[{"a\\"]\\\\":-0.5,"x":-1},null]}';

function withLogprobs(logprobs: string, echo = JSON_IDS): string {
  return `{"id":"cmpl-1","choices":[{"index":0,"text":"hi","logprobs":${logprobs},"token_ids":[7,8],"prompt_token_ids":${echo}}],"usage":{"prompt_tokens":5}}`;
}

/** JSON.parse's value with the first choice's unread logprobs fields read as 0. */
function unread(text: string): unknown {
  const value = JSON.parse(text);
  const logprobs = value.choices[0].logprobs;
  for (const name of ["text_offset", "tokens", "top_logprobs"]) if (name in logprobs) logprobs[name] = 0;
  return value;
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
    ["logprobs with an echo not as sent", withLogprobs(LOGPROBS, "[1]")],
    ["text beyond ASCII around the echo", answer(JSON_IDS, "é✓ 世界", ',"x":"ü"')],
    [
      "the fields in another choice",
      `{"choices":[{"prompt_token_ids":${JSON_IDS},"logprobs":null},{"logprobs":${LOGPROBS}}]}`,
    ],
  ];
  for (const [name, text] of cases)
    it(`is JSON.parse's value: ${name}`, () => {
      expect(parseEchoing(text, JSON_IDS, IDS)).toEqual(JSON.parse(text));
    });

  it("reads an answer that is part of a larger buffer (the socket's chunk)", () => {
    const text = withLogprobs(LOGPROBS);
    const chunk = Buffer.from(`HTTP/1.1 200 OK\r\n\r\n${text}`);
    const body = chunk.subarray(chunk.length - Buffer.byteLength(text));
    const parsed = parseEchoingBytes(body, JSON_IDS, IDS) as { choices: { prompt_token_ids: unknown }[] };
    expect(parsed.choices[0].prompt_token_ids).toBe(IDS);
    expect(parsed).toEqual({
      ...(unread(text) as object),
      choices: [{ ...(unread(text) as { choices: object[] }).choices[0], prompt_token_ids: IDS }],
    });
  });

  it("reads the echo as sent as the very ids sent, without parsing them again", () => {
    const parsed = parseEchoing(answer(JSON_IDS), JSON_IDS, IDS) as {
      choices: { prompt_token_ids: unknown }[];
    };
    expect(parsed.choices[0].prompt_token_ids).toBe(IDS);
  });

  it("reads the logprobs' per-token texts, offsets and top-k maps as 0, token_logprobs as sent", () => {
    for (const logprobs of [
      LOGPROBS,
      '{"token_logprobs":[-2],"tokens":[],"top_logprobs":null}',
      '{"text_offset":[0],"token_logprobs":[-2],"tokens":["世"],"top_logprobs":[{"世":-2,"é":-3}]}',
    ]) {
      const text = withLogprobs(logprobs);
      const parsed = parseEchoing(text, JSON_IDS, IDS) as { choices: { prompt_token_ids: unknown }[] };
      expect(parsed).toEqual({
        ...(unread(text) as object),
        choices: [{ ...(unread(text) as { choices: object[] }).choices[0], prompt_token_ids: IDS }],
      });
      expect(parsed.choices[0].prompt_token_ids).toBe(IDS);
    }
  });

  it("leaves a field whose key appears twice (a token's text is its name) as JSON.parse reads it", () => {
    const text = withLogprobs(
      '{"text_offset":[0],"token_logprobs":[-1],"tokens":["x"],"top_logprobs":[{"tokens":-1}]}',
    );
    const parsed = parseEchoing(text, JSON_IDS, IDS) as { choices: { logprobs: unknown }[] };
    expect(parsed.choices[0].logprobs).toEqual({
      text_offset: 0,
      token_logprobs: [-1],
      tokens: ["x"],
      top_logprobs: 0,
    });
  });

  it("is undefined for text that is not JSON, also around an echo as sent", () => {
    expect(parseEchoing(answer(JSON_IDS).slice(0, -1), JSON_IDS, IDS)).toBeUndefined();
    expect(parseEchoing(`{"a":"b"prompt_token_ids":${JSON_IDS}}`, JSON_IDS, IDS)).toBeUndefined();
    expect(
      parseEchoing(withLogprobs(LOGPROBS).replace('"tokens":["', '"tokens":[["'), JSON_IDS, IDS),
    ).toBeUndefined();
    expect(parseEchoing("not json", JSON_IDS, IDS)).toBeUndefined();
    expect(parseEchoing("", JSON_IDS, IDS)).toBeNull();
  });
});
