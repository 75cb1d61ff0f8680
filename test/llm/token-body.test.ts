// A completions body with the prompt's ids given as JSON text is the text JSON.stringify writes
// for the body object.
import { describe, expect, it } from "vitest";
import { JsonText } from "../../src/llm/http.ts";
import { withPrompt } from "../../src/llm/token-engine.ts";

const IDS = [151644, 8948, 198, 0, 42];

function text(body: Record<string, unknown> | JsonText): string {
  return body instanceof JsonText ? body.text : JSON.stringify(body);
}

describe("withPrompt", () => {
  const rests: Record<string, unknown>[] = [
    { max_tokens: 16, temperature: 1, seed: 5, logprobs: 0, return_token_ids: true },
    { structured_outputs: { grammar: 'root ::= "é"' }, cache_salt: 's\u2028"x😀', nothing: undefined },
    {},
  ];
  for (const lead of [{ model: "Qwen/Qwen3-0.6B" }, {}, { model: undefined }, { model: "модель" }])
    for (const rest of rests)
      it(`writes JSON.stringify's text (lead ${JSON.stringify(lead)}, rest ${JSON.stringify(rest)})`, () => {
        const body = withPrompt(lead, IDS, JSON.stringify(IDS), rest);
        expect(body).toBeInstanceOf(JsonText);
        expect(text(body)).toBe(JSON.stringify({ ...lead, prompt: IDS, ...rest }));
        // The byte length it carries is the one the Content-Length header needs.
        expect((body as JsonText).bytes).toBe(Buffer.byteLength(text(body)));
      });

  it("is the object when rest would replace the prompt or a lead key in place, or has integer-like keys", () => {
    const lead = { model: "m" };
    for (const rest of [{ prompt: [1] }, { model: "other" }, { "0": 1 }]) {
      const body = withPrompt(lead, IDS, JSON.stringify(IDS), rest);
      expect(body).not.toBeInstanceOf(JsonText);
      expect(body).toEqual({ ...lead, prompt: IDS, ...rest });
    }
  });

  it("is the object without the prompt's JSON", () => {
    expect(withPrompt({ model: "m" }, IDS, undefined, { a: 1 })).toEqual({ model: "m", prompt: IDS, a: 1 });
  });
});
