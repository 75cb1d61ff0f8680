// Python 3.11's notions of text (str.isspace / strip / lower, `re` \s for str patterns).
// RAGEN parses model output with these, and they differ from JavaScript's: JS `\s` and
// `trim()` include U+FEFF but not U+001C..U+001F or U+0085; Node 24 lower-cases with
// Unicode 17 data while CPython 3.11 uses Unicode 14.

/**
 * Regex character class (source text) equal to Python 3.11 `re` `\s` on str patterns,
 * i.e. exactly the characters for which `str.isspace()` is true. Embed it in a RegExp
 * source; it needs no flags.
 */
export const PY_SPACE_CLASS: string =
  "[\\t-\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]";

const PY_SPACE_RE = new RegExp(`^${PY_SPACE_CLASS}$`);

/** Python `str.isspace()` for one UTF-16 unit (every Python space is in the BMP). */
export function pyIsSpaceCode(code: number): boolean {
  return (
    (code >= 0x09 && code <= 0x0d) ||
    (code >= 0x1c && code <= 0x20) ||
    code === 0x85 ||
    code === 0xa0 ||
    code === 0x1680 ||
    (code >= 0x2000 && code <= 0x200a) ||
    code === 0x2028 ||
    code === 0x2029 ||
    code === 0x202f ||
    code === 0x205f ||
    code === 0x3000
  );
}

/** Python `ch.isspace()` for a single character (one code point). */
export function pyIsSpace(ch: string): boolean {
  return PY_SPACE_RE.test(ch);
}

/** Python `s.strip()` (no arguments), in one pass from each end (a regex `\s+$` is quadratic). */
export function pyStrip(s: string): string {
  let start = 0;
  let end = s.length;
  while (start < end && pyIsSpaceCode(s.charCodeAt(start))) start++;
  while (end > start && pyIsSpaceCode(s.charCodeAt(end - 1))) end--;
  return start === 0 && end === s.length ? s : s.slice(start, end);
}

// Code points whose case data in Node 24 (ICU, Unicode 17) is newer than CPython 3.11's
// Unicode 14: all were unassigned in Unicode 14, so Python gives them no lower-case
// mapping and treats them as neither cased nor case-ignorable. The exhaustive table test
// (test/fixtures/parse/pytext.json) catches any drift if Node's ICU changes.
const NEWER_THAN_PY: readonly (readonly [number, number])[] = [
  [0x897, 0x897],
  [0xece, 0xece],
  [0x1acf, 0x1add],
  [0x1ae0, 0x1aeb],
  [0x1c89, 0x1c8a],
  [0xa7cb, 0xa7cf],
  [0xa7d2, 0xa7d2],
  [0xa7d4, 0xa7d4],
  [0xa7da, 0xa7dc],
  [0xa7f1, 0xa7f1],
  [0x10d4e, 0x10d4e],
  [0x10d50, 0x10d65],
  [0x10d69, 0x10d6d],
  [0x10d6f, 0x10d85],
  [0x10ec5, 0x10ec5],
  [0x10efa, 0x10eff],
  [0x11241, 0x11241],
  [0x113bb, 0x113c0],
  [0x113ce, 0x113ce],
  [0x113d0, 0x113d0],
  [0x113d2, 0x113d2],
  [0x113e1, 0x113e2],
  [0x11b60, 0x11b60],
  [0x11b62, 0x11b64],
  [0x11b66, 0x11b66],
  [0x11dd9, 0x11dd9],
  [0x11f00, 0x11f01],
  [0x11f36, 0x11f3a],
  [0x11f40, 0x11f40],
  [0x11f42, 0x11f42],
  [0x11f5a, 0x11f5a],
  [0x13439, 0x13440],
  [0x13447, 0x13455],
  [0x1611e, 0x16129],
  [0x1612d, 0x1612f],
  [0x16d40, 0x16d42],
  [0x16d6b, 0x16d6c],
  [0x16ea0, 0x16eb8],
  [0x16ebb, 0x16ed3],
  [0x16ff2, 0x16ff3],
  [0x1df25, 0x1df2a],
  [0x1e030, 0x1e06d],
  [0x1e08f, 0x1e08f],
  [0x1e4eb, 0x1e4ef],
  [0x1e5ee, 0x1e5ef],
  [0x1e6e3, 0x1e6e3],
  [0x1e6e6, 0x1e6e6],
  [0x1e6ee, 0x1e6ef],
  [0x1e6f5, 0x1e6f5],
  [0x1e6ff, 0x1e6ff],
];
// Assigned in Unicode 14 but re-categorised later (Unicode 16): U+0295 was Ll (cased),
// U+1171E was Mn (case-ignorable).
const PY_CASED_EXTRA = 0x295;
const PY_IGNORABLE_EXTRA = 0x1171e;

const CASED_RE = /^\p{Cased}$/u;
const CASE_IGNORABLE_RE = /^\p{Case_Ignorable}$/u;
const ASCII_RE = /^\p{ASCII}*$/u;
const CAPITAL_SIGMA = 0x3a3;

function isNewerThanPy(cp: number): boolean {
  if (cp < 0x897) return false;
  for (const [lo, hi] of NEWER_THAN_PY) {
    if (cp < lo) return false;
    if (cp <= hi) return true;
  }
  return false;
}

function pyIsCaseIgnorable(cp: number): boolean {
  if (cp === PY_IGNORABLE_EXTRA) return true;
  if (isNewerThanPy(cp)) return false;
  return CASE_IGNORABLE_RE.test(String.fromCodePoint(cp));
}

function pyIsCased(cp: number): boolean {
  if (cp === PY_CASED_EXTRA) return true;
  if (isNewerThanPy(cp)) return false;
  return CASED_RE.test(String.fromCodePoint(cp));
}

// CPython's Final_Sigma test (unicodeobject.c handle_capital_sigma): a case-ignorable
// character is skipped even when it is also cased.
function isFinalSigma(cps: readonly number[], i: number): boolean {
  let j = i - 1;
  while (j >= 0 && pyIsCaseIgnorable(cps[j])) j--;
  if (j < 0 || !pyIsCased(cps[j])) return false;
  j = i + 1;
  while (j < cps.length && pyIsCaseIgnorable(cps[j])) j++;
  return j === cps.length || !pyIsCased(cps[j]);
}

/** Python 3.11 `s.lower()` (full Unicode 14 mappings, including Final_Sigma). */
export function pyLower(s: string): string {
  if (ASCII_RE.test(s)) return s.toLowerCase();
  const cps: number[] = [];
  for (const ch of s) cps.push(ch.codePointAt(0)!);
  let out = "";
  for (let i = 0; i < cps.length; i++) {
    const cp = cps[i];
    if (cp === CAPITAL_SIGMA) {
      out += isFinalSigma(cps, i) ? "\u03c2" : "\u03c3";
    } else if (isNewerThanPy(cp)) {
      out += String.fromCodePoint(cp);
    } else {
      // Per code point, so JS's own context-sensitive sigma rule never applies.
      out += String.fromCodePoint(cp).toLowerCase();
    }
  }
  return out;
}
