// Exact high word of a 32x32-bit product without BigInt.

const TWO_POW_MINUS_32 = 1 / 4294967296;

/**
 * High 32 bits of a * b for uint32 a, b, given the exact low word (`Math.imul(a, b) >>> 0`).
 * The double product is within 2**10 of the exact one and removing the low word adds at most
 * 2**10 more, so the scaled value is within 2**-21 of the answer; +0.5 and truncation round it.
 * Plain truncation would be off by one where the product rounds down across a power of two.
 */
export function mulHi32(a: number, b: number, lo: number): number {
  return ((a * b - lo) * TWO_POW_MINUS_32 + 0.5) >>> 0;
}
