// The bystander, in its own process so an attacker's busy event loop cannot slow it: polls
// /healthz every 50 ms (worst latency, failures) and plays well-behaved rollouts one after
// another (alternating stream and batch delivery), until the parent sends "stop"; then it
// reports over IPC and exits.
// Usage (forked by bench/attacks.ts and bench/soak.ts): prober.ts URL [TOKEN]
import { type GoodRolloutShape, goodRollout } from "./client.ts";
import { type ProbeReport, probeReport } from "./probe-report.ts";

const [url, token] = process.argv.slice(2);
const report: ProbeReport = probeReport(0);
let stopping = false;
let inFlight = 0;
const pending = new Set<number>();
const started = performance.now();
const latency = (start: number, ms: number) => {
  if (ms <= report.healthz_worst_ms) return;
  report.healthz_worst_ms = ms;
  report.healthz_worst_at_s = Math.round((start - started) / 100) / 10;
};

const poll = setInterval(() => {
  // A request that has not answered yet counts toward the worst latency as it stands.
  const now = performance.now();
  for (const start of pending) latency(start, now - start);
  if (inFlight >= 100) return;
  inFlight++;
  const start = performance.now();
  pending.add(start);
  fetch(`${url}/healthz`, { signal: AbortSignal.timeout(10_000) })
    .then(async (res) => {
      await res.arrayBuffer();
      if (!res.ok) report.healthz_failures++;
    })
    .catch(() => report.healthz_failures++)
    .finally(() => {
      inFlight--;
      pending.delete(start);
      report.healthz_checks++;
      const ms = performance.now() - start;
      if (ms >= 1000) {
        report.healthz_over_1s++;
        if (report.healthz_slow_samples.length < 8)
          report.healthz_slow_samples.push([Math.round((start - started) / 100) / 10, Math.round(ms)]);
      }
      latency(start, ms);
    });
}, 50);

const shapes: GoodRolloutShape[] = [
  { groups: 2, groupSize: 2, delivery: "stream" },
  { groups: 2, groupSize: 2, delivery: "batch" },
];

const loop = (async () => {
  for (let i = 0; !stopping; i++) {
    try {
      await goodRollout(url, `good${i}`, 30_000, { ...shapes[i % 2], seed: 7 + i }, token || undefined);
      report.rollouts_completed++;
      // A trainer between steps, not a load generator.
      await new Promise((r) => setTimeout(r, 50));
    } catch (error) {
      if (stopping) break;
      report.rollouts_failed++;
      report.last_failure = error instanceof Error ? error.message : String(error);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
})();

process.on("message", async (message) => {
  if (message !== "stop") return;
  stopping = true;
  // The rollout under way gets a moment to finish; one still stuck is not counted either way.
  await Promise.race([loop, new Promise((r) => setTimeout(r, 3000))]);
  clearInterval(poll);
  report.healthz_worst_ms = Math.round(report.healthz_worst_ms);
  process.send!(report, () => process.exit(0));
});
