// NumPy's `SeedSequence(entropy)` with the default pool of four 32-bit words and no spawn key:
// hash the entropy words into the pool, then hash the pool out into any number of state words.

const POOL_SIZE = 4;
const INIT_A = 0x43b0d7e5;
const MULT_A = 0x931e8875;
const INIT_B = 0x8b51f9dd;
const MULT_B = 0x58f38ded;
const MIX_MULT_L = 0xca01f9dd;
const MIX_MULT_R = 0x4973f715;

/** Non-negative integer → little-endian uint32 words; 0 gives [0]. */
function entropyWords(entropy: number | bigint): number[] {
  if (typeof entropy === "number") {
    if (!Number.isInteger(entropy))
      throw new RangeError(`SeedSequence entropy must be an integer, got ${entropy}`);
    entropy = BigInt(entropy);
  }
  if (entropy < 0n) throw new RangeError(`SeedSequence entropy must be non-negative, got ${entropy}`);
  const words: number[] = [];
  do {
    words.push(Number(entropy & 0xffffffffn));
    entropy >>= 32n;
  } while (entropy > 0n);
  return words;
}

function mix(x: number, y: number): number {
  let result = (Math.imul(MIX_MULT_L, x) - Math.imul(MIX_MULT_R, y)) >>> 0;
  result ^= result >>> 16;
  return result >>> 0;
}

export class SeedSequence {
  readonly entropy: bigint;
  private readonly pool: Uint32Array;

  constructor(entropy: number | bigint) {
    const words = entropyWords(entropy);
    this.entropy = typeof entropy === "bigint" ? entropy : BigInt(entropy);
    this.pool = new Uint32Array(POOL_SIZE);
    // The hash multiplier evolves across every hashmix call, so it lives outside the helper.
    let hashConst = INIT_A;
    const hashmix = (value: number): number => {
      value = (value ^ hashConst) >>> 0;
      hashConst = Math.imul(hashConst, MULT_A) >>> 0;
      value = Math.imul(value, hashConst) >>> 0;
      return (value ^ (value >>> 16)) >>> 0;
    };
    const pool = this.pool;
    for (let i = 0; i < POOL_SIZE; i++) pool[i] = hashmix(i < words.length ? words[i] : 0);
    for (let src = 0; src < POOL_SIZE; src++) {
      for (let dst = 0; dst < POOL_SIZE; dst++) {
        if (src !== dst) pool[dst] = mix(pool[dst], hashmix(pool[src]));
      }
    }
    for (let src = POOL_SIZE; src < words.length; src++) {
      for (let dst = 0; dst < POOL_SIZE; dst++) pool[dst] = mix(pool[dst], hashmix(words[src]));
    }
  }

  /** `generate_state(n, uint32)`; a uint64 request is the same words paired little-endian. */
  generateState(nWords: number): Uint32Array {
    if (!Number.isInteger(nWords) || nWords < 0) throw new RangeError(`nWords must be >= 0, got ${nWords}`);
    const out = new Uint32Array(nWords);
    let hashConst = INIT_B;
    for (let i = 0; i < nWords; i++) {
      let value = (this.pool[i % POOL_SIZE] ^ hashConst) >>> 0;
      hashConst = Math.imul(hashConst, MULT_B) >>> 0;
      value = Math.imul(value, hashConst) >>> 0;
      out[i] = value ^ (value >>> 16);
    }
    return out;
  }
}
