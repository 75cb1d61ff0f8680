// What the engine reports: GET /mock/stats (stats() as JSON, the mock's own) and GET /metrics
// through prom-client, with vLLM's names, help texts, types and labels (`engine`, `model_name`;
// facts §4.5), so dashboards and `rollgym bench`'s scraping (src/bench/prometheus.ts) read the
// mock as they read vLLM, plus the mock's own under `mock_engine:`. Every value is read from
// stats() when scraped, so the metrics cannot drift from it: stats() stays the one count.
import { Counter, Gauge, Registry } from "prom-client";
import type { EngineCore } from "../core.ts";
import { DEFAULTED_FIELDS } from "../generation-config.ts";
import { sendJson } from "../http.ts";
import type { MockEngineStats } from "../stats.ts";
import type { Routes } from "./route.ts";

/** What a scrape reads. */
export interface MetricsView {
  /** stats() as of the scrape. */
  stats: MockEngineStats;
  paused: boolean;
  /** Engine slots (Infinity: unlimited). */
  maxConcurrency: number;
}

type Samples = [labels: Record<string, string>, value: number][];

interface Family {
  name: string;
  help: string;
  type: "counter" | "gauge";
  /** Labels beyond `engine` and `model_name`. */
  labelNames?: string[];
  samples(view: MetricsView): Samples;
}

const one = (value: number): Samples => [[{}, value]];
const single =
  (type: Family["type"]) =>
  (name: string, help: string, read: (view: MetricsView) => number): Family => ({
    name,
    help,
    type,
    samples: (view) => one(read(view)),
  });
const gauge = single("gauge");
const counter = single("counter");

const FAMILIES: readonly Family[] = [
  gauge(
    "vllm:num_requests_running",
    "Number of requests in model execution batches.",
    (v) => v.stats.running,
  ),
  gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", (v) => v.stats.waiting),
  // The mock has no KV cache: its slots stand for it.
  gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", (v) =>
    Number.isFinite(v.maxConcurrency) ? v.stats.running / v.maxConcurrency : 0,
  ),
  counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", (v) => v.stats.promptTokens),
  counter(
    "vllm:generation_tokens_total",
    "Number of generation tokens processed.",
    (v) => v.stats.generationTokens,
  ),
  {
    name: "vllm:request_success_total",
    help: "Count of successfully processed requests.",
    type: "counter",
    labelNames: ["finished_reason"],
    samples: (v) =>
      (["stop", "length", "abort"] as const).map((r) => [{ finished_reason: r }, v.stats.finishReasons[r]]),
  },
  counter(
    "vllm:prefix_cache_queries_total",
    "Prefix cache queries, in terms of number of queried tokens.",
    (v) => v.stats.prefixCacheQueries,
  ),
  counter(
    "vllm:prefix_cache_hits_total",
    "Prefix cache hits, in terms of number of cached tokens.",
    (v) => v.stats.prefixCacheHits,
  ),
  counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", () => 0),
  // Not vLLM's: what the mock did on purpose, for load-test dashboards.
  {
    name: "mock_engine:http_requests_total",
    help: "HTTP requests received, by route (other: a path no route serves).",
    type: "counter",
    labelNames: ["route"],
    samples: (v) => Object.entries(v.stats.requestsByRoute).map(([route, n]) => [{ route }, n]),
  },
  {
    name: "mock_engine:injected_faults_total",
    help: "Faults injected by the mock engine.",
    type: "counter",
    labelNames: ["kind"],
    samples: ({ stats: s }) => [
      [{ kind: "internal_error" }, s.internalErrors],
      [{ kind: "unavailable" }, s.unavailable],
      [{ kind: "rate_limit" }, s.rateLimited],
      [{ kind: "drop" }, s.dropped],
      [{ kind: "slow" }, s.slow],
      [{ kind: "abort" }, s.injectedAborts],
    ],
  },
  counter(
    "mock_engine:format_errors_total",
    "Malformed answers served on purpose.",
    (v) => v.stats.formatErrors,
  ),
  counter(
    "mock_engine:generation_config_defaults_requests_total",
    "Generation requests in which a field took the server's generation-config default.",
    (v) => v.stats.defaultsApplied,
  ),
  {
    name: "mock_engine:generation_config_defaults_total",
    help: "Generation requests in which this field took the server's generation-config default.",
    type: "counter",
    labelNames: ["field"],
    samples: (v) => DEFAULTED_FIELDS.map((f) => [{ field: f }, v.stats.defaultsAppliedByField[f]]),
  },
  gauge("mock_engine:paused", "1 while the engine is paused (/pause).", (v) => (v.paused ? 1 : 0)),
  counter("mock_engine:pauses_total", "Pauses applied (/pause answered 200).", (v) => v.stats.pauses),
  counter("mock_engine:resumes_total", "Resumes applied (/resume answered 200).", (v) => v.stats.resumes),
  counter(
    "mock_engine:decoded_tokens_total",
    "Tokens decoded so far, including the fractional progress of running requests.",
    (v) => v.stats.decodedTokens,
  ),
  gauge(
    "mock_engine:per_token_seconds",
    "The latency model's per-token time at the current number of running requests.",
    (v) => v.stats.perTokenMs / 1000,
  ),
  counter(
    "mock_engine:cpu_seconds_total",
    "CPU time (user + system) of the process the mock engine runs in.",
    (v) => v.stats.cpuSeconds,
  ),
];

/** One engine's metrics in their own registry (several engines may share a process). */
export class EngineMetrics {
  readonly contentType: string = Registry.PROMETHEUS_CONTENT_TYPE;
  readonly #registry = new Registry();
  readonly #read: () => MetricsView;
  /** The view of the scrape under way: one stats() read for every family. */
  #scrape: MetricsView | null = null;

  constructor(model: string, read: () => MetricsView) {
    this.#read = read;
    const engine = { engine: "0", model_name: model };
    const view = (): MetricsView => this.#scrape ?? this.#read();
    for (const family of FAMILIES) {
      const common = {
        name: family.name,
        help: family.help,
        labelNames: [...(family.labelNames ?? []), "engine", "model_name"],
        registers: [this.#registry],
      };
      // The family's own labels first, as vLLM's exposition orders them.
      const samples = (): Samples =>
        family.samples(view()).map(([labels, value]) => [{ ...labels, ...engine }, value]);
      if (family.type === "gauge")
        new Gauge({
          ...common,
          collect() {
            for (const [labels, value] of samples()) this.set(labels, value);
          },
        });
      else
        new Counter({
          ...common,
          // A mirror of stats(): set to its current value at each scrape.
          collect() {
            this.reset();
            for (const [labels, value] of samples()) this.inc(labels, value);
          },
        });
    }
  }

  /** The Prometheus text exposition, as of now. */
  text(): Promise<string> {
    this.#scrape = this.#read();
    // prom-client runs every collect() before its first await; were that to change, each
    // family would read stats() on its own, still correct.
    const text = this.#registry.metrics();
    this.#scrape = null;
    return text;
  }
}

export function metricsRoutes(core: EngineCore): Routes {
  const metrics = new EngineMetrics(core.config.models[0], () => ({
    stats: core.statsNow(),
    paused: core.pause.mode !== null,
    maxConcurrency: core.config.maxConcurrency,
  }));
  return {
    "/metrics": {
      methods: ["GET"],
      async handle({ res, echo }) {
        const text = await metrics.text();
        res.writeHead(200, { "content-type": metrics.contentType, ...echo });
        res.end(text);
      },
    },
    "/mock/stats": { methods: ["GET"], handle: ({ res, echo }) => sendJson(res, 200, core.statsNow(), echo) },
  };
}
