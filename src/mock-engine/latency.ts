// The mock engine's latency model: time to first token, a per-token time that grows once the
// batch is past its knee (as a GPU's decode step does when more sequences share it), and the
// response-length distribution. Presets name the models `rollgym bench` reports against.
import type { Rng } from "./rng.ts";

/** Response lengths (tokens, EOS included), lognormal: the median and 99th percentile. */
export interface LognormalLengths {
  kind: "lognormal";
  median: number;
  p99: number;
}

export interface LatencyModel {
  /** Time to first token, ms. */
  ttftMs: number;
  /** Time per further output token while at most `batchKnee` requests run, ms. */
  tpotMs: number;
  /** Running requests up to which the per-token time holds. */
  batchKnee: number;
  /** Per-token time grows by this share per running request beyond the knee. */
  slowdownPerRequest: number;
  /** Response lengths; null: the policy's own short answers (about 10–30 tokens). */
  responseTokens: LognormalLengths | null;
}

export type LatencyPresetName = "none" | "default" | "slow10x";
export const LATENCY_PRESET_NAMES: readonly LatencyPresetName[] = ["none", "default", "slow10x"];

const BENCH_LENGTHS: LognormalLengths = { kind: "lognormal", median: 60, p99: 400 };

export const LATENCY_PRESETS: Readonly<Record<LatencyPresetName, Readonly<LatencyModel>>> = {
  /** Answers at once, in the policy's own lengths: what the library and the tests default to. */
  none: { ttftMs: 0, tpotMs: 0, batchKnee: 64, slowdownPerRequest: 0, responseTokens: null },
  /** `rollgym bench`'s model: a small model on one GPU. */
  default: { ttftMs: 50, tpotMs: 10, batchKnee: 64, slowdownPerRequest: 0.01, responseTokens: BENCH_LENGTHS },
  /** Tenfold slower, so the engine's capacity fits on a small CPU machine beside rollgym. */
  slow10x: {
    ttftMs: 500,
    tpotMs: 100,
    batchKnee: 64,
    slowdownPerRequest: 0.01,
    responseTokens: BENCH_LENGTHS,
  },
};

/** The per-token time with `running` requests in the batch: tpot × (1 + s × (running − knee)). */
export function perTokenMs(
  model: Pick<LatencyModel, "tpotMs" | "batchKnee" | "slowdownPerRequest">,
  running: number,
): number {
  return model.tpotMs * (1 + model.slowdownPerRequest * Math.max(0, running - model.batchKnee));
}

/** The standard normal's 99th percentile. */
const Z99 = 2.3263478740408408;

/** One response length in tokens (at least 1), drawn from `rng`. */
export function drawResponseTokens(lengths: LognormalLengths, rng: Rng): number {
  const sigma = Math.log(lengths.p99 / lengths.median) / Z99;
  // Box–Muller; 1 - u keeps the logarithm finite.
  const z = Math.sqrt(-2 * Math.log(1 - rng.next())) * Math.cos(2 * Math.PI * rng.next());
  return Math.max(1, Math.round(lengths.median * Math.exp(sigma * z)));
}

/** Checks a lengths object; the message names the field and what is allowed. */
export function checkLognormalLengths(lengths: LognormalLengths): LognormalLengths {
  if (lengths.kind !== "lognormal")
    throw new RangeError(`responseTokens.kind must be "lognormal", got ${String(lengths.kind)}`);
  if (!Number.isFinite(lengths.median) || lengths.median < 1)
    throw new RangeError(`responseTokens.median must be a number ≥ 1, got ${lengths.median}`);
  if (!Number.isFinite(lengths.p99) || lengths.p99 < lengths.median)
    throw new RangeError(
      `responseTokens.p99 must be a number ≥ the median (${lengths.median}), got ${lengths.p99}`,
    );
  return { kind: "lognormal", median: lengths.median, p99: lengths.p99 };
}

/** "lognormal:MEDIAN:P99" or "natural" (null), as the CLI takes it. */
export function parseResponseTokens(text: string): LognormalLengths | null {
  if (text === "natural") return null;
  const m = /^lognormal:(\d+(?:\.\d+)?):(\d+(?:\.\d+)?)$/.exec(text);
  if (!m) throw new RangeError(`${JSON.stringify(text)} is not "lognormal:MEDIAN:P99" or "natural"`);
  return checkLognormalLengths({ kind: "lognormal", median: Number(m[1]), p99: Number(m[2]) });
}

function ms(value: number): string {
  return `${Number(value.toFixed(3))} ms`;
}

/**
 * One line that says what the engine simulates, e.g. "TTFT 50 ms + 10 ms/token, +1% per-token
 * time per running request beyond 64; response tokens lognormal median 60, p99 400, capped at
 * max_tokens". Printed with every result that depends on it.
 */
export function describeLatencyModel(model: LatencyModel): string {
  const parts: string[] = [];
  if (model.ttftMs === 0 && model.tpotMs === 0) parts.push("no latency");
  else {
    let timing = `TTFT ${ms(model.ttftMs)} + ${ms(model.tpotMs).replace(" ms", " ms/token")}`;
    if (model.tpotMs > 0 && model.slowdownPerRequest > 0)
      timing += `, +${Number((model.slowdownPerRequest * 100).toFixed(4))}% per-token time per running request beyond ${model.batchKnee}`;
    parts.push(timing);
  }
  const lengths = model.responseTokens;
  parts.push(
    lengths === null
      ? "policy-length answers"
      : `response tokens lognormal median ${lengths.median}, p99 ${lengths.p99}, capped at max_tokens`,
  );
  return parts.join("; ");
}
