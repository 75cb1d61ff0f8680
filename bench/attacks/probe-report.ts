// What the bystander process (prober.ts) reports about one attack: /healthz latency and its
// well-behaved rollouts.

export interface ProbeReport {
  healthz_worst_ms: number;
  /** Seconds after the prober started at which the worst /healthz request was sent. */
  healthz_worst_at_s: number;
  /** /healthz requests that took 1 s or more. */
  healthz_over_1s: number;
  /** The first few slow /healthz requests: [seconds after start when sent, ms taken]. */
  healthz_slow_samples: [number, number][];
  healthz_checks: number;
  healthz_failures: number;
  rollouts_completed: number;
  rollouts_failed: number;
  last_failure: string;
}

/** A report with nothing counted yet (`worst`: NaN when the prober never ran). */
export function probeReport(worst: number, lastFailure = ""): ProbeReport {
  return {
    healthz_worst_ms: worst,
    healthz_worst_at_s: worst,
    healthz_over_1s: 0,
    healthz_slow_samples: [],
    healthz_checks: 0,
    healthz_failures: 0,
    rollouts_completed: 0,
    rollouts_failed: 0,
    last_failure: lastFailure,
  };
}
