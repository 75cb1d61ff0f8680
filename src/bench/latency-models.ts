// The mock engine's latency presets as the bench names them. The mock engine owns the model
// (`rollgym mock-engine --latency-model NAME`) and describes it in its start-up line; the bench
// prints that description with every result, so a figure never travels without the engine
// speed it was measured at.

export const LATENCY_MODELS = ["default", "slow10x", "none"] as const;
export type LatencyModelName = (typeof LATENCY_MODELS)[number];

/** The description in the mock engine's start-up line ("…; latency: TEXT"), or null. */
export function latencyFromBanner(banner: string): string | null {
  const at = banner.indexOf("latency: ");
  return at < 0 ? null : banner.slice(at + "latency: ".length).trim();
}
