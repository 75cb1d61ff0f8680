// Reading Prometheus text (the server's /metrics, an engine's /metrics): one number per metric
// name, summed over its label sets, which is all a bench needs from a counter or a gauge; and
// each series under its own text (`name{label="value",…}`) for the few read by label.
import { setTimeout as delay } from "node:timers/promises";
import { Client } from "undici";
import { serverRoot } from "../llm/engine.ts";

export type Samples = Map<string, number>;

export function parsePrometheus(text: string): Samples {
  const samples: Samples = new Map();
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const brace = line.indexOf("{");
    const space = line.lastIndexOf(" ");
    if (space < 0) continue;
    const name = line.slice(0, brace >= 0 && brace < space ? brace : line.indexOf(" "));
    const value = Number(line.slice(space + 1));
    if (!Number.isFinite(value)) continue;
    samples.set(name, (samples.get(name) ?? 0) + value);
    if (brace >= 0 && brace < space) samples.set(line.slice(0, space), value);
  }
  return samples;
}

/**
 * GET `url` and parse it; one failed read (no answer, or an HTTP error) is tried once more, since
 * a bench that dies at its last scrape loses the whole run, but not one that timed out: it has
 * waited SCRAPE_TIMEOUT_MS already. Rejects naming the URL, the status and both attempts when
 * the second fails too. Reads go over one kept-alive connection per origin (ScrapeConnections).
 */
export async function scrape(url: string, timeoutMs = SCRAPE_TIMEOUT_MS): Promise<Samples> {
  try {
    return await scrapeOnce(url, timeoutMs);
  } catch (first) {
    if (first instanceof ScrapeTimeout) throw first;
    try {
      return await scrapeOnce(url, timeoutMs);
    } catch (second) {
      throw new Error(`${messageOf(second)} (tried twice; first: ${messageOf(first)})`);
    }
  }
}

/** Generous: a server whose event loop stalls answers late, and that is a finding, not an error. */
const SCRAPE_TIMEOUT_MS = 180_000;

async function scrapeOnce(url: string, timeoutMs: number): Promise<Samples> {
  const { origin, pathname, search } = new URL(url);
  try {
    const response = await scrapeConnections.client(origin).request({
      path: pathname + search,
      method: "GET",
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await response.body.text();
    if (response.statusCode < 200 || response.statusCode > 299) throw new HttpStatus(response.statusCode);
    return parsePrometheus(text);
  } catch (error) {
    const message = `GET ${url}: ${messageOf(error)}`;
    // AbortSignal.timeout rejects with a DOMException named TimeoutError.
    if ((error as { name?: unknown })?.name === "TimeoutError")
      throw new ScrapeTimeout(`${message} (no answer in ${timeoutMs / 1000} s)`);
    throw new Error(message);
  }
}

class ScrapeTimeout extends Error {}

class HttpStatus extends Error {
  constructor(status: number) {
    super(`HTTP ${status}`);
  }
}

/**
 * One connection per origin for every /metrics read, kept open by a read at least every
 * KEEP_MS while `keep` runs. At 10,240 connections the mock engine's accept queue stays full
 * (its one core is busy streaming, and connections the server gives up on come back as new
 * ones): a read on a new connection waited behind thousands of others, over a minute, and the
 * window's engine counters came that late. On a connection already open it waits only for the
 * engine's event loop.
 */
class ScrapeConnections {
  private readonly clients = new Map<string, Client>();
  private keeping: { stop: boolean } | null = null;

  client(origin: string): Client {
    let client = this.clients.get(origin);
    if (client === undefined) {
      // Never closed from this side while the bench runs; a server's close opens a new one.
      client = new Client(origin, {
        pipelining: 1,
        keepAliveTimeout: 3_600_000,
        keepAliveMaxTimeout: 3_600_000,
        headersTimeout: 0,
        bodyTimeout: 0,
      });
      this.clients.set(origin, client);
    }
    return client;
  }

  /** Reads `urls` one after another, KEEP_MS apart, until `close`: their connections never idle out. */
  keep(urls: readonly string[]): void {
    if (this.keeping) return;
    const keeping = { stop: false };
    this.keeping = keeping;
    void (async () => {
      while (!keeping.stop) {
        await Promise.all(urls.map((url) => scrapeOnce(url, SCRAPE_TIMEOUT_MS).catch(() => {})));
        await delay(KEEP_MS);
      }
    })();
  }

  /** Stops keeping and closes every connection. */
  async close(): Promise<void> {
    if (this.keeping) this.keeping.stop = true;
    this.keeping = null;
    const clients = [...this.clients.values()];
    this.clients.clear();
    await Promise.all(clients.map((c) => c.destroy().catch(() => {})));
  }
}

/** Below the mock engine's and uvicorn's 5 s keep-alive timeout. */
const KEEP_MS = 1_000;

export const scrapeConnections = new ScrapeConnections();

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** An engine's /metrics from its OpenAI base URL (…/v1 → …/metrics). */
export function engineMetricsUrl(baseUrl: string): string {
  return `${serverRoot(baseUrl)}/metrics`;
}

/** What an engine has done, from vLLM's counter names (the mock engine serves the same ones). */
export interface EngineCounters {
  /** Chat and completion requests finished, any finish reason. */
  requests: number;
  generatedTokens: number;
  promptTokens: number;
  /** Requests in the engine's batch at the moment of the scrape (a gauge). */
  running: number;
  /**
   * Every HTTP request the engine received by route, the bench's own scrapes left out (the mock
   * engine's mock_engine:http_requests_total; empty for engines that do not count them).
   */
  routes: Record<string, number>;
}

const HTTP_REQUESTS = /^mock_engine:http_requests_total\{(?:.*,)?route="([^"]*)"/;
/** The bench's reads, not requests of the server under test. */
const BENCH_ROUTES = new Set(["/metrics", "/mock/stats"]);

/** Engine requests by route, summed over engines; null if no engine counted any. */
export function engineRequests(counters: EngineCounters): number | null {
  const values = Object.values(counters.routes);
  return values.length === 0 ? null : values.reduce((a, b) => a + b, 0);
}

export function engineCounters(samples: Samples): EngineCounters {
  return {
    requests: samples.get("vllm:request_success_total") ?? 0,
    generatedTokens: samples.get("vllm:generation_tokens_total") ?? 0,
    promptTokens: samples.get("vllm:prompt_tokens_total") ?? 0,
    running: samples.get("vllm:num_requests_running") ?? 0,
    routes: routesOf(samples),
  };
}

function routesOf(samples: Samples): Record<string, number> {
  const routes: Record<string, number> = {};
  for (const [key, value] of samples) {
    const route = HTTP_REQUESTS.exec(key)?.[1];
    if (route !== undefined && !BENCH_ROUTES.has(route)) routes[route] = (routes[route] ?? 0) + value;
  }
  return routes;
}

function addRoutes(a: Record<string, number>, b: Record<string, number>): Record<string, number> {
  const sum = { ...a };
  for (const [route, n] of Object.entries(b)) sum[route] = (sum[route] ?? 0) + n;
  return sum;
}

/** Sums the counters of several engines (replicas), scraped at once. */
export async function scrapeEngines(urls: readonly string[]): Promise<EngineCounters> {
  const all = await Promise.all(urls.map(async (url) => engineCounters(await scrape(engineMetricsUrl(url)))));
  return all.reduce(
    (sum, c) => ({
      requests: sum.requests + c.requests,
      generatedTokens: sum.generatedTokens + c.generatedTokens,
      promptTokens: sum.promptTokens + c.promptTokens,
      running: sum.running + c.running,
      routes: addRoutes(sum.routes, c.routes),
    }),
    { requests: 0, generatedTokens: 0, promptTokens: 0, running: 0, routes: {} },
  );
}

/**
 * Samples the engines' running requests once a second from `start()` to `stop()`: the mean
 * says how full the engine's batch was kept, which is what its throughput follows.
 */
export class RunningSampler {
  private readonly urls: readonly string[];
  private readonly samples: number[] = [];
  private timer: NodeJS.Timeout | null = null;

  constructor(urls: readonly string[]) {
    this.urls = urls;
  }

  start(): void {
    this.timer ??= setInterval(() => {
      scrapeEngines(this.urls).then(
        (c) => {
          if (this.timer) this.samples.push(c.running);
        },
        () => {},
      );
    }, 1000);
  }

  /** The mean of the samples taken, or null if there were none. */
  stop(): number | null {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    if (this.samples.length === 0) return null;
    return Math.round(this.samples.reduce((a, b) => a + b, 0) / this.samples.length);
  }
}
