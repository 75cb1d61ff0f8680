// A deterministic toy tokenizer with a Qwen-like surface: chat special tokens, the RAGEN tags
// as single added tokens, a fixed list of word pieces (with and without a leading space) and
// 256 byte tokens as the fallback, so every string encodes and decode(encode(s)) === s.
//
// Id layout (stable; clients may rely on it only through /tokenize):
//   0..6      special and added tokens (SPECIAL_TOKENS order)
//   7..262    bytes 0x00..0xFF
//   263..     word pieces (WORDS, each as "w" then " w"), then NUMBERS and PUNCTUATION pieces

export const SPECIAL_TOKENS = [
  "<|endoftext|>",
  "<|im_start|>",
  "<|im_end|>",
  "<think>",
  "</think>",
  "<answer>",
  "</answer>",
] as const;

export const ENDOFTEXT_ID = 0;
export const IM_START_ID = 1;
export const IM_END_ID = 2;
export const THINK_ID = 3;
export const THINK_END_ID = 4;
export const ANSWER_ID = 5;
export const ANSWER_END_ID = 6;
/** Skipped under skip_special_tokens; the RAGEN tags are added tokens that stay in the text. */
const SKIPPED_IDS: ReadonlySet<number> = new Set([ENDOFTEXT_ID, IM_START_ID, IM_END_ID]);

const BYTE_BASE = SPECIAL_TOKENS.length;
const WORD_BASE = BYTE_BASE + 256;

// Words of RAGEN's prompts and of the mock's own answers, so typical traffic is mostly one
// token per word and token counts look like a real BPE's rather than one per byte.
const WORDS: readonly string[] = [
  // actions and arms
  "Up",
  "Down",
  "Left",
  "Right",
  "up",
  "down",
  "left",
  "right",
  "Teacher",
  "Trader",
  "Nurse",
  "StartupFounder",
  "Librarian",
  "Investor",
  "Accountant",
  "StockBroker",
  "Engineer",
  "RealEstateAgent",
  "Pharmacist",
  "Musician",
  "Clerk",
  "Freelancer",
  "Technician",
  "Youtuber",
  "Planner",
  "Artist",
  "Postman",
  "Pilot",
  "Banker",
  "VentureCapitalist",
  "Gardener",
  "Cryptominer",
  "Receptionist",
  "Explorer",
  "Archivist",
  "Filmmaker",
  "Bookkeeper",
  "Consultant",
  "SocialWorker",
  "Photographer",
  "Mechanic",
  "GameDesigner",
  "Secretary",
  "Entrepreneur",
  "Cashier",
  "DataScientist",
  "CivilServant",
  "StartupAccelerator",
  // prompt vocabulary
  "You",
  "you",
  "re",
  "a",
  "an",
  "the",
  "The",
  "helpful",
  "assistant",
  "are",
  "solving",
  "puzzle",
  "Sokoban",
  "FrozenLake",
  "player",
  "and",
  "need",
  "to",
  "push",
  "all",
  "boxes",
  "box",
  "targets",
  "target",
  "Turn",
  "State",
  "Reward",
  "have",
  "actions",
  "action",
  "left",
  "Always",
  "output",
  "Your",
  "thoughts",
  "your",
  "answer",
  "with",
  "no",
  "extra",
  "text",
  "Strictly",
  "follow",
  "this",
  "format",
  "Max",
  "response",
  "length",
  "words",
  "tokens",
  "available",
  "can",
  "make",
  "up",
  "separated",
  "by",
  "separator",
  "meaning",
  "of",
  "each",
  "symbol",
  "in",
  "state",
  "is",
  "wall",
  "empty",
  "on",
  "Coordinates",
  "Board",
  "size",
  "rows",
  "cols",
  "zero",
  "indexed",
  "Targets",
  "Boxes",
  "Player",
  "Grid",
  "Map",
  "Start",
  "Goal",
  "Holes",
  "hole",
  "goal",
  "ice",
  "slippery",
  "agent",
  "might",
  "slide",
  "bandit",
  "game",
  "arm",
  "arms",
  "named",
  "reward",
  "rewards",
  "pull",
  "Choose",
  "between",
  "or",
  "like",
  "which",
  "points",
  "No",
  "valid",
  "provided",
  "previously",
  "Environment",
  "remains",
  "same",
  "Please",
  "try",
  "again",
  "sequence",
  "such",
  "as",
  "Respond",
  "It",
  "I",
  "will",
  "move",
  "should",
  "go",
  "then",
  "next",
  "looks",
  "safe",
  "Let",
  "me",
  "think",
  "Moving",
  "seems",
  "best",
  "first",
  "toward",
  "closer",
  "Try",
  "pick",
  "choose",
  "because",
  "is",
  "it",
  "not",
  "be",
  "for",
  "from",
  "at",
];

const NUMBERS: readonly string[] = Array.from({ length: 100 }, (_, i) => String(i));
const PUNCTUATION: readonly string[] = [
  "\n\n",
  "||",
  " ||",
  "##",
  "###",
  "####",
  "######",
  "...",
  "),",
  "):",
];

function buildPieces(): string[] {
  const pieces: string[] = [];
  const seen = new Set<string>();
  const add = (p: string): void => {
    if (!seen.has(p)) {
      seen.add(p);
      pieces.push(p);
    }
  };
  for (const w of WORDS) {
    add(w);
    add(` ${w}`);
  }
  for (const n of NUMBERS) {
    add(n);
    add(` ${n}`);
  }
  for (const p of PUNCTUATION) add(p);
  return pieces;
}

const PIECES: readonly string[] = buildPieces();
const PIECE_IDS: ReadonlyMap<string, number> = new Map(PIECES.map((p, i) => [p, WORD_BASE + i]));
const SPECIAL_IDS: ReadonlyMap<string, number> = new Map(SPECIAL_TOKENS.map((s, i) => [s, i]));

export const VOCAB_SIZE = WORD_BASE + PIECES.length;

// Pre-tokenization: a partition of any string into pieces, equivalent to the regex
//   <specials>| ?[A-Za-z]+| ?[0-9]{1,2}|\n\n| ?\|\|| ?[^\sA-Za-z0-9<|]+|[<|]|\s
// (GPT-2-like word / number / punctuation runs with an optional leading space). "<" takes no
// leading space, so nothing swallows the start of a special token. A hand-written scanner,
// because the regex is several times slower and prompts are re-encoded every turn.

function isLetter(c: number): boolean {
  return (c >= 65 && c <= 90) || (c >= 97 && c <= 122);
}

function isDigit(c: number): boolean {
  return c >= 48 && c <= 57;
}

/** JavaScript's \s. */
function isSpace(c: number): boolean {
  if (c <= 32) return c === 32 || (c >= 9 && c <= 13);
  if (c < 160) return false;
  return (
    c === 160 ||
    c === 5760 ||
    (c >= 8192 && c <= 8202) ||
    c === 8232 ||
    c === 8233 ||
    c === 8239 ||
    c === 8287 ||
    c === 12288 ||
    c === 65279
  );
}

function isPunct(c: number): boolean {
  return c !== 60 && c !== 124 && !isLetter(c) && !isDigit(c) && !isSpace(c);
}

/** Where the piece that starts at `i` ends. */
function pieceEnd(text: string, i: number): number {
  const n = text.length;
  const c = text.charCodeAt(i);
  if (c === 60) {
    for (const special of SPECIAL_TOKENS) if (text.startsWith(special, i)) return i + special.length;
    return i + 1;
  }
  let j = i;
  if (c === 32 && i + 1 < n) j = i + 1; // a leading space joins the next run
  const d = text.charCodeAt(j);
  if (isLetter(d)) {
    j++;
    while (j < n && isLetter(text.charCodeAt(j))) j++;
    return j;
  }
  if (isDigit(d)) return j + 1 < n && isDigit(text.charCodeAt(j + 1)) ? j + 2 : j + 1;
  if (c === 10 && text.charCodeAt(i + 1) === 10) return i + 2;
  if (d === 124 && text.charCodeAt(j + 1) === 124) return j + 2;
  if (isPunct(d)) {
    // Surrogate halves count as punctuation, so a pair is never split.
    j++;
    while (j < n && isPunct(text.charCodeAt(j))) j++;
    return j;
  }
  return i + 1; // one whitespace character, or a lone "<" or "|"
}

/** The pre-tokenized pieces of `text` (their concatenation is `text`). */
export function pretokenize(text: string): string[] {
  const pieces: string[] = [];
  for (let i = 0; i < text.length; ) {
    const end = pieceEnd(text, i);
    pieces.push(text.slice(i, end));
    i = end;
  }
  return pieces;
}

const utf8 = new TextEncoder();

// Piece encodings repeat a lot (prompts are re-sent every turn); a bounded cache keeps it cheap.
const CACHE_LIMIT = 100_000;
const pieceCache = new Map<string, readonly number[]>();

function encodePiece(piece: string): readonly number[] {
  const special = SPECIAL_IDS.get(piece);
  if (special !== undefined) return [special];
  const id = PIECE_IDS.get(piece);
  if (id !== undefined) return [id];
  let ids = pieceCache.get(piece);
  if (ids === undefined) {
    // A leading-space word that is not in the vocabulary may still be a known bare word.
    const bare = piece.length > 1 && piece[0] === " " ? PIECE_IDS.get(piece.slice(1)) : undefined;
    ids =
      bare !== undefined ? [BYTE_BASE + 0x20, bare] : Array.from(utf8.encode(piece), (b) => BYTE_BASE + b);
    if (pieceCache.size >= CACHE_LIMIT) pieceCache.clear();
    pieceCache.set(piece, ids);
  }
  return ids;
}

/** Text to ids. Special-token text in the input becomes the special token (as HF does). */
export function encode(text: string): number[] {
  const out: number[] = [];
  for (let i = 0; i < text.length; ) {
    const end = pieceEnd(text, i);
    const ids = encodePiece(text.slice(i, end));
    if (ids.length === 1) out.push(ids[0]);
    else for (const id of ids) out.push(id);
    i = end;
  }
  return out;
}

export function isValidId(id: number): boolean {
  return Number.isInteger(id) && id >= 0 && id < VOCAB_SIZE;
}

export function isByteId(id: number): boolean {
  return id >= BYTE_BASE && id < WORD_BASE;
}

export function isSkippedSpecial(id: number): boolean {
  return SKIPPED_IDS.has(id);
}

/** The token's own text (a byte token's byte as Latin-1 if not a whole character). */
function pieceText(id: number): string {
  if (id < BYTE_BASE) return SPECIAL_TOKENS[id];
  if (id < WORD_BASE) return String.fromCharCode(id - BYTE_BASE);
  return PIECES[id - WORD_BASE];
}

/** Incremental detokenizer: feed ids, get the text each one adds (bytes held until complete). */
export class StreamDecoder {
  readonly #skipSpecial: boolean;
  readonly #decoder = new TextDecoder("utf-8", { fatal: false });

  constructor(options: { skipSpecialTokens: boolean }) {
    this.#skipSpecial = options.skipSpecialTokens;
  }

  push(id: number): string {
    if (isByteId(id)) return this.#decoder.decode(new Uint8Array([id - BYTE_BASE]), { stream: true });
    const pending = this.#decoder.decode();
    if (this.#skipSpecial && SKIPPED_IDS.has(id)) return pending;
    return pending + pieceText(id);
  }

  /** Whatever bytes are still pending (as U+FFFD), at the end of the sequence. */
  flush(): string {
    return this.#decoder.decode();
  }
}

export interface DecodeOptions {
  /** Drop <|im_start|>, <|im_end|>, <|endoftext|> (vLLM's default for outputs). */
  skipSpecialTokens?: boolean;
}

/** Ids to text. Throws RangeError on an id outside the vocabulary. */
export function decode(ids: readonly number[], options: DecodeOptions = {}): string {
  const decoder = new StreamDecoder({ skipSpecialTokens: options.skipSpecialTokens ?? false });
  let text = "";
  for (const id of ids) {
    if (!isValidId(id)) throw new RangeError(`Token id ${id} is out of vocabulary`);
    text += decoder.push(id);
  }
  return text + decoder.flush();
}

/** The raw vocabulary entry (`token_strs`), GPT-2 style: Ġ for a space, Ċ for a newline. */
export function tokenStr(id: number): string {
  if (id < BYTE_BASE) return SPECIAL_TOKENS[id];
  if (id < WORD_BASE) {
    const b = id - BYTE_BASE;
    if (b === 0x20) return "Ġ";
    if (b === 0x0a) return "Ċ";
    if (b > 0x20 && b < 0x7f) return String.fromCharCode(b);
    return `<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`;
  }
  return PIECES[id - WORD_BASE].replaceAll(" ", "Ġ").replaceAll("\n", "Ċ");
}

/** The token decoded on its own, as logprobs show it (a partial UTF-8 byte gives U+FFFD). */
export function tokenText(id: number): string {
  if (isByteId(id)) {
    const b = id - BYTE_BASE;
    return b < 0x80 ? String.fromCharCode(b) : "\uFFFD";
  }
  return pieceText(id);
}

/** The token's UTF-8 bytes (a byte token is its one raw byte), for chat logprobs' `bytes`. */
export function tokenBytes(id: number): number[] {
  if (isByteId(id)) return [id - BYTE_BASE];
  return Array.from(utf8.encode(pieceText(id)));
}

/** Word-piece ids, for filler text (ignore_eos, min_tokens) and logprob alternatives. */
function wordPieceId(index: number): number {
  return WORD_BASE + (index % PIECES.length);
}

const WORD_PIECE_COUNT = PIECES.length;

// --- the tokenizer interface the server uses (the toy above, or the real Qwen3 one) ---------

export type TokenizerName = "toy" | "qwen3";

export const TOKENIZER_NAMES: readonly TokenizerName[] = ["toy", "qwen3"];

/** Incremental detokenization: the text each id adds (partial UTF-8 held until complete). */
export interface TokenStreamDecoder {
  push(id: number): string;
  /** Whatever bytes are still pending (as U+FFFD), at the end of the sequence. */
  flush(): string;
}

/** What the mock needs from a tokenizer: vLLM's view of it (ids, text, logprob strings). */
export interface MockTokenizer {
  readonly name: TokenizerName;
  /**
   * Ids the engine accepts are 0..vocabSize-1 (the model's vocabulary: for Qwen3 it is larger
   * than the tokenizer's, and the extra ids decode to nothing); logprobs -1 means this many.
   */
  readonly vocabSize: number;
  /** `<|im_end|>`: the end of every answer (EOS). */
  readonly eosId: number;
  /** Text to ids; special-token text becomes the special token (as vLLM's tokenizers do). */
  encode(text: string): number[];
  /** Ids to text. Throws RangeError on an id outside 0..vocabSize-1. */
  decode(ids: readonly number[], options?: DecodeOptions): string;
  isValidId(id: number): boolean;
  streamDecoder(options: { skipSpecialTokens: boolean }): TokenStreamDecoder;
  /** The raw vocabulary entry (`/tokenize`'s `token_strs`). */
  tokenStr(id: number): string;
  /** The token decoded on its own, as logprobs show it. */
  tokenText(id: number): string;
  /** Chat logprobs' `bytes`. */
  tokenBytes(id: number): number[];
  /** Ids of ordinary word tokens: filler text (ignore_eos, min_tokens) and logprob alternatives. */
  readonly fillerIds: readonly number[];
}

/** The toy tokenizer above as a MockTokenizer (the default: fast, Qwen-like surface). */
export const TOY_TOKENIZER: MockTokenizer = {
  name: "toy",
  vocabSize: VOCAB_SIZE,
  eosId: IM_END_ID,
  encode,
  decode,
  isValidId,
  streamDecoder: (options) => new StreamDecoder(options),
  tokenStr,
  tokenText,
  tokenBytes,
  fillerIds: Array.from({ length: WORD_PIECE_COUNT }, (_, i) => wordPieceId(i)),
};
