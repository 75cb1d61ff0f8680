// NumPy's integer bounds as both generator APIs take them: (n) means [0, n), (low, high) means
// [low, high). Returns low and the inclusive span high − 1 − low.

export function integerSpan(name: string, low: number, high?: number): { low: number; span: number } {
  if (high === undefined) {
    high = low;
    low = 0;
  }
  // Bounds may reach ±2**53: every integer between them is still exact.
  if (
    !Number.isInteger(low) ||
    !Number.isInteger(high) ||
    Math.abs(low) > 2 ** 53 ||
    Math.abs(high) > 2 ** 53
  ) {
    throw new RangeError(`${name} bounds must be integers within ±2**53, got ${low}, ${high}`);
  }
  if (low >= high) throw new RangeError(`low >= high (${low}, ${high})`);
  return { low, span: high - 1 - low };
}
