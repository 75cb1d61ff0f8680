// A mock inference engine that speaks vLLM's OpenAI-compatible dialect over node:http, for
// load and fault-tolerance tests of a rollout engine: RAGEN-format answers from a built-in
// policy, a latency model (TTFT + per-token time that grows with the batch, response lengths,
// engine slots) run in virtual time (scheduler.ts), and seeded fault injection. This module
// wires the routes (one module per family under routes/) to an HTTP server, with the outages
// tests switch on and off.
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { createCore } from "./core.ts";
import { ApiError, httpError } from "./errors.ts";
import { type Headers, headerValue, readBody, retryAfter, sendError } from "./http.ts";
import type { LatencyModel } from "./latency.ts";
import { type MockEngineOptions, resolveConfig } from "./options.ts";
import type { PauseMode } from "./pause.ts";
import { chatCompletionRoutes } from "./routes/chat-completions.ts";
import { completionRoutes } from "./routes/completions.ts";
import { controlRoutes } from "./routes/control.ts";
import { healthRoutes } from "./routes/health.ts";
import { metricsRoutes } from "./routes/metrics.ts";
import { modelRoutes } from "./routes/models.ts";
import type { Routes } from "./routes/route.ts";
import { tokenizeRoutes } from "./routes/tokenize.ts";
import type { MockEngineStats } from "./stats.ts";
import type { MockTokenizer } from "./tokenizer.ts";
import { type JsonObject, parseJsonBody } from "./validate.ts";
import type { GenerationRecord } from "./weights.ts";

export { DEFAULT_MODEL, type MockEngineOptions } from "./options.ts";
export type { PauseMode } from "./pause.ts";
export type { MockEngineStats } from "./stats.ts";
export type { GenerationRecord } from "./weights.ts";

/** A whole-server outage for tests: sockets reset without an answer, or 503 to everything. */
export type Outage = "reset" | "503" | null;

export interface MockEngine {
  /** Base URL including /v1, e.g. http://127.0.0.1:PORT/v1. */
  url: string;
  port: number;
  /** The tokenizer the engine serves (its ids, EOS and text), for in-process checks. */
  tokenizer: MockTokenizer;
  /** The latency model in force (print it with describeLatencyModel). */
  latency: Readonly<LatencyModel>;
  close(): Promise<void>;
  stats(): MockEngineStats;
  /**
   * Start (or end, with null) an outage. "reset" destroys every new connection and every request
   * on a kept-alive one without an answer; "503" answers every request 503 (Retry-After from
   * `retryAfterS`, else the engine's option).
   */
  setOutage(kind: Outage, options?: { retryAfterS?: number | null }): void;
  /** As POST /pause?mode=…&clear_cache=… (default true, as vLLM's): resolves when vLLM's route would answer. */
  pause(mode?: PauseMode, clearCache?: boolean): Promise<void>;
  /** As POST /resume. */
  resume(): void;
  /** From now on POST /pause answers 500 with `reason` (vLLM's body) and pauses nothing; null: it pauses again. */
  refusePause(reason: string | null): void;
  /** The next `times` POST /resume answer 500 and leave the engine paused. */
  failResume(times: number): void;
  isPaused(): boolean;
  /** As POST /mock/load_weights: a simulated trainer loads `version`, between decode steps. */
  loadWeights(version: string): void;
  /** The weights generating tokens now, and the label /weight_info reports. */
  weights(): { loaded: string; label: string };
  /** As GET /mock/generations: which loaded weights made each token of each request. */
  generations(): GenerationRecord[];
}

/**
 * node:http's options for the engine. No headers or request timeout: Node's (a request's headers
 * within 60 s of its connection being accepted or of the request starting, the whole request
 * within 300 s) answer HTTP 408 and close the connection, which vLLM's server (uvicorn with h11)
 * never does. With 10,240 connections open the mock's event loop can be busy long enough between
 * accepting a connection and reading its request for Node's check to fire, and a bench's /metrics
 * scrape got a 408 instead of the counters (issue 32).
 */
export const HTTP_SERVER_OPTIONS = {
  keepAlive: true,
  noDelay: true,
  headersTimeout: 0,
  requestTimeout: 0,
} as const;

export async function startMockEngine(options: MockEngineOptions = {}): Promise<MockEngine> {
  const config = resolveConfig(options);
  const core = await createCore(config);
  const { stats } = core;
  const routes: Routes = {
    ...healthRoutes(core),
    ...metricsRoutes(core),
    ...modelRoutes(core),
    ...tokenizeRoutes(core),
    ...chatCompletionRoutes(core),
    ...completionRoutes(core),
    ...controlRoutes(core),
  };
  let closing: Promise<void> | null = null;
  let outage: Outage = null;
  let outageRetryAfterS: number | null = config.retryAfterS;

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    stats.requests++;
    res.on("error", () => {}); // a client that vanished mid-write is handled via "close"
    if (outage === "reset") {
      stats.outageResets++;
      req.socket.destroy();
      return;
    }
    const url = new URL(req.url ?? "/", "http://mock");
    const route = routes[url.pathname];
    const counted = route ? url.pathname : "other";
    stats.requestsByRoute[counted] = (stats.requestsByRoute[counted] ?? 0) + 1;
    const echoId = headerValue(req, "x-request-id");
    const echo: Headers = echoId ? { "x-request-id": echoId } : {};
    try {
      if (outage === "503") {
        stats.outageUnavailable++;
        sendError(
          res,
          httpError(503, "Service Unavailable"),
          config.errorShape,
          retryAfter(outageRetryAfterS),
        );
        return;
      }
      if (!route) throw httpError(404, "Not Found");
      if (!route.methods.includes(req.method ?? "")) throw httpError(405, "Method Not Allowed");
      let body: JsonObject = {};
      if (route.json) {
        const raw = await readBody(req);
        const contentType = headerValue(req, "content-type") ?? "";
        if (!contentType.toLowerCase().startsWith("application/json"))
          throw new ApiError(
            400,
            "Bad Request",
            "Unsupported Media Type: Only 'application/json' is allowed",
          );
        body = parseJsonBody(raw);
      }
      await route.handle({ req, res, url, body, echo });
    } catch (error) {
      if (res.headersSent || res.destroyed) {
        res.destroy();
        return;
      }
      const apiError =
        error instanceof ApiError ? error : new ApiError(500, "InternalServerError", "Internal server error");
      if (apiError.status < 500) stats.rejected++;
      sendError(res, apiError, config.errorShape, echo);
    }
  }

  const server = createServer(HTTP_SERVER_OPTIONS, (req, res) => {
    void handle(req, res);
  });
  // uvicorn's default under vLLM is 5 s; say it explicitly, since clients pool connections.
  server.keepAliveTimeout = 5000;
  server.on("connection", (socket) => {
    if (outage !== "reset") return;
    stats.outageResets++;
    socket.destroy();
  });

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    // A deep accept queue: a load test opens thousands of connections at once (the kernel caps
    // it at net.core.somaxconn).
    server.listen({ port: config.port, host: "127.0.0.1", backlog: 65_535 }, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;

  return {
    url: `http://127.0.0.1:${port}/v1`,
    port,
    tokenizer: core.tokenizer,
    latency: config.latency,
    stats: core.statsNow,
    setOutage(kind: Outage, opts: { retryAfterS?: number | null } = {}): void {
      if (kind !== null && kind !== "reset" && kind !== "503")
        throw new RangeError(`outage must be "reset", "503" or null, got ${String(kind)}`);
      outage = kind;
      outageRetryAfterS = opts.retryAfterS === undefined ? config.retryAfterS : opts.retryAfterS;
      // Kept-alive sockets would otherwise carry on: the next request on them is reset too.
      if (kind === "reset") server.closeIdleConnections();
    },
    pause: (mode: PauseMode = "abort", clearCache = true): Promise<void> =>
      core.pause.pause(mode, clearCache),
    resume: (): void => core.pause.resume(),
    refusePause(reason: string | null): void {
      if (reason !== null && (typeof reason !== "string" || reason === ""))
        throw new RangeError(`refusePause takes a non-empty reason or null, got ${JSON.stringify(reason)}`);
      core.pause.refusal = reason;
    },
    failResume(times: number): void {
      if (!Number.isInteger(times) || times < 0)
        throw new RangeError(`failResume takes a non-negative integer, got ${times}`);
      core.pause.resumeFailures = times;
    },
    isPaused: (): boolean => core.pause.mode !== null,
    loadWeights: (version: string): void => core.weights.load(version, () => core.scheduler.advance()),
    weights: () => ({ loaded: core.weights.loaded, label: core.weights.label }),
    generations: () => core.weights.records().generations,
    close(): Promise<void> {
      closing ??= new Promise<void>((resolve) => {
        const force = setTimeout(() => server.closeAllConnections(), config.closeGraceMs);
        force.unref();
        server.close(() => {
          clearTimeout(force);
          core.scheduler.close();
          resolve();
        });
        server.closeIdleConnections();
      });
      return closing;
    },
  };
}
