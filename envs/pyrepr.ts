// Python's repr() of numbers, which RAGEN prints into prompts ("Reward:\n-0.1\n") and Bandit
// observations ("Trader: 1.0 points"). JS String() agrees on the digits but not on the layout:
// Python writes 1.0 where JS writes 1, and switches to exponent form at other magnitudes.

/** repr() of a Python float holding `x`. */
export function pyFloatRepr(x: number): string {
  if (Number.isNaN(x)) return "nan";
  if (x === Infinity) return "inf";
  if (x === -Infinity) return "-inf";
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  // toExponential() without an argument yields the shortest round-trip digits, as repr does.
  const [mantissa, exponentText] = x.toExponential().split("e");
  const negative = mantissa.startsWith("-");
  const digits = mantissa.replace("-", "").replace(".", "");
  const exponent = Number(exponentText);
  const decimalPoint = exponent + 1; // digits before the decimal point
  let body: string;
  if (decimalPoint <= -4 || decimalPoint > 16) {
    const fraction = digits.length > 1 ? `.${digits.slice(1)}` : "";
    const sign = exponent < 0 ? "-" : "+";
    body = `${digits[0]}${fraction}e${sign}${String(Math.abs(exponent)).padStart(2, "0")}`;
  } else if (decimalPoint <= 0) {
    body = `0.${"0".repeat(-decimalPoint)}${digits}`;
  } else if (decimalPoint >= digits.length) {
    body = `${digits}${"0".repeat(decimalPoint - digits.length)}.0`;
  } else {
    body = `${digits.slice(0, decimalPoint)}.${digits.slice(decimalPoint)}`;
  }
  return negative ? `-${body}` : body;
}

/** repr() of a Python int holding `x`. */
export function pyIntRepr(x: number): string {
  if (!Number.isSafeInteger(x)) throw new RangeError(`pyIntRepr: ${x} is not a safe integer`);
  return String(x);
}

/** repr() of a value that Python holds as an int when `isInt`, otherwise as a float. */
export function pyNumberRepr(x: number, isInt: boolean): string {
  return isInt ? pyIntRepr(x) : pyFloatRepr(x);
}
