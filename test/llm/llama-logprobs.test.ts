// llama.cpp's completion_probabilities leave out tokens that end inside a UTF-8 character;
// each reported entry is placed at its own token, or not used when repeated ids leave its
// place open, and the unreported ones stay NaN.
import { describe, expect, it } from "vitest";
import { UnusableAnswer } from "../../src/llm/http.ts";
import { alignLlamaLogprobs } from "../../src/llm/token-engine.ts";

const entry = (id: number, prob: number) => ({ id, prob });

describe("alignLlamaLogprobs", () => {
  it("places entries by id and leaves the skipped tokens NaN", () => {
    // 7 and 8 are the first bytes of a character that 9 completes; llama.cpp reports only 9.
    const got = alignLlamaLogprobs([5, 7, 8, 9, 6], [entry(5, 0.5), entry(9, 0.25), entry(6, 1)], true);
    expect(got[0]).toBeCloseTo(Math.log(0.5));
    expect(got[1]).toBeNaN();
    expect(got[2]).toBeNaN();
    expect(got[3]).toBeCloseTo(Math.log(0.25));
    expect(got[4]).toBe(0);
  });

  it("reads logprob instead of prob without post-sampling probabilities", () => {
    expect(
      alignLlamaLogprobs(
        [3, 4],
        [
          { id: 3, logprob: -1.5 },
          { id: 4, logprob: -0.5 },
        ],
        false,
      ),
    ).toEqual([-1.5, -0.5]);
  });

  it("never guesses between repeated ids: an entry with two possible places is not used", () => {
    // Either the first or the second 7 was left out: the reported 7 belongs to one of them.
    const got = alignLlamaLogprobs([7, 7, 2], [entry(7, 0.5), entry(2, 0.5)], true);
    expect(got[0]).toBeNaN();
    expect(got[1]).toBeNaN();
    expect(got[2]).toBeCloseTo(Math.log(0.5));
    // Trailing entries cut after a stop string: the leading ones are still placed.
    const cut = alignLlamaLogprobs([1, 2, 3], [entry(1, 0.5)], true);
    expect(cut[0]).toBeCloseTo(Math.log(0.5));
    expect(cut.slice(1).every(Number.isNaN)).toBe(true);
  });

  it("an entry out of order is an answer rollgym cannot use", () => {
    expect(() => alignLlamaLogprobs([1, 2], [entry(2, 0.5), entry(1, 0.5)], true)).toThrow(UnusableAnswer);
    expect(() => alignLlamaLogprobs([1, 2], [entry(3, 0.5)], true)).toThrow(/not for the 2 tokens/);
  });
});
