// Loads the reference vectors written by test/fixtures/rng/generate.py (real CPython / NumPy).

import { readFileSync } from "node:fs";

export function loadFixture<T>(name: string): T {
  const url = new URL(`../../fixtures/rng/${name}`, import.meta.url);
  return JSON.parse(readFileSync(url, "utf8")) as T;
}

export function range(n: number): number[] {
  return Array.from({ length: n }, (_, i) => i);
}

/** JSON decimal string → number when it is exactly representable, else bigint. */
export function seedValue(text: string): number | bigint {
  const big = BigInt(text);
  const num = Number(big);
  return Number.isSafeInteger(num) ? num : big;
}
