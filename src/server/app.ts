// The server factory: a fastify app with the HTTP routes (/healthz, /metrics, /v1/envs, the web
// page at / and its routes) and the WebSocket route /v1/rollouts (ws, attached at the HTTP
// upgrade after the token check).
// Tests call buildServer directly and listen on 127.0.0.1:0.
import { readFileSync } from "node:fs";
import { type IncomingMessage, STATUS_CODES } from "node:http";
import type { Duplex } from "node:stream";
import Fastify, { type FastifyInstance } from "fastify";
import { type WebSocket, WebSocketServer } from "ws";
import { createRegistry } from "../../envs/catalog.ts";
import type { EnvRegistry } from "../../envs/registry.ts";
import { deeperThan, MAX_JSON_DEPTH } from "../../protocol/bounded-json.ts";
import { CLOSE_CODES, encodeMessage } from "../../protocol/codec.ts";
import { MAX_TRAINER_TOKEN_LENGTH } from "../../protocol/messages.ts";
import { withoutSecrets } from "../../protocol/secret-urls.ts";
import { defaultConfig, type RollgymConfig } from "../config/index.ts";
import { httpRefusal } from "../errors/boundary.ts";
import { RollgymError } from "../errors/catalogue.ts";
import { oraclePolicy } from "../llm/builtin.ts";
import type { Policy } from "../llm/policy.ts";
import { authorized } from "./auth.ts";
import { admitWaiting, MemoryBudget } from "./budget.ts";
import { handleConnection } from "./connection.ts";
import {
  ConnectionGuard,
  type ConnectionLimits,
  closeWithin,
  heartbeat,
  httpServerOptions,
} from "./connections.ts";
import { welcomeLimits } from "./limits.ts";
import { createMetrics, instrumentPolicy } from "./metrics.ts";
import { type OpenEnvLimits, OpenEnvServer } from "./openenv.ts";
import { type OriginOptions, OriginPolicy } from "./origin.ts";
import { securityHeaders } from "./security-headers.ts";
import type { Session } from "./session.ts";
import { DEFAULT_LIMITS, type ServerLimits, type ServerState } from "./state.ts";
import { UpdateCoordinator } from "./update-coordinator.ts";
import { WatchHub, type WatchLimits } from "./watch.ts";
import type { FileLimits } from "./web/files.ts";
import { registerWeb, webOptions } from "./web/routes.ts";

export interface ServerOptions extends Partial<ServerLimits> {
  /** The memory budget's earlier name: maxHeldBytes when that is not given. */
  maxEnvBytes?: number;
  /** The per-session share's earlier name: maxHeldBytesPerConnection when that is not given. */
  maxEnvBytesPerConnection?: number;
  config?: RollgymConfig;
  registry?: EnvRegistry;
  /** Inference; the built-in oracle when omitted. */
  policy?: Policy;
  /** Bearer token required at the upgrade; null or omitted = open. */
  token?: string | null;
  /** The token a hello with role "trainer" must carry (hello.trainer_token); null or omitted = the role is anyone's. */
  trainerToken?: string | null;
  /** Groups of one rollout played at once. */
  groupConcurrency?: number;
  /** How long a SIGTERM lets running rollouts finish before cancelling them. */
  shutdownDeadlineMs?: number;
  logger?: boolean | { level: string };
  /** Directory of episode files the web page's Replay may list and open; none when omitted. */
  share?: string | null;
  /** Watch subscriptions (the web page's Watch and other read-only observers). */
  watch?: Partial<WatchLimits>;
  /** Episode-file uploads and shared files for the web page. */
  files?: Partial<FileLimits>;
  /** Browser origins and host names allowed besides the server's own (docs/server.md "Browsers"). */
  browsers?: Partial<OriginOptions>;
  /** Connection caps and timeouts (docs/server.md "Connections"). */
  connections?: Partial<ConnectionLimits>;
  /** Sessions of rollgym's tags served as OpenEnv environments (docs/openenv.md). */
  openenv?: Partial<OpenEnvLimits>;
  /**
   * At shutdown, how long cancelled rollouts get to send their verdicts, and then how long
   * clients get to answer the close before their connections are dropped.
   */
  closeGraceMs?: number;
}

export interface RollgymServer {
  app: FastifyInstance;
  state: ServerState;
  /** Listen; resolves to the base http URL. */
  listen(port?: number, host?: string): Promise<string>;
  /**
   * Graceful shutdown: refuse new work, let rollouts finish until the deadline, close. Called
   * again while it runs, it cancels the running rollouts at once (their verdicts still go out).
   */
  shutdown(reason?: string): Promise<ShutdownReport>;
}

export interface ShutdownReport {
  /** Rollouts still running at the deadline (or at a second shutdown call), cancelled. */
  cancelled: number;
  /** Connections dropped because their client did not answer the close in time. */
  dropped: number;
}

const VERSION = (
  JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string }
).version;

export async function buildServer(options: ServerOptions = {}): Promise<RollgymServer> {
  const guard = new ConnectionGuard(options.connections);
  const app = Fastify({
    logger: loggerWithoutSecrets(options.logger ?? false),
    ...httpServerOptions(guard.limits),
  });
  guard.attach(app.server);
  const origins = new OriginPolicy(options.browsers);
  // Before anything else, bodies included: a browser page that may not use the server gets 403.
  app.addHook("onRequest", async (request, reply) => {
    const why = origins.refusal(request.raw, state.options.token !== null);
    if (why === null) return;
    if (request.method === "POST") reply.header("connection", "close");
    const { status, body } = httpRefusal(new RollgymError("foreign_origin", { message: why }))!;
    return reply.code(status).send(body);
  });
  securityHeaders(app, origins);
  boundJsonBodies(app);
  // fastify's own 404 logs the URL as sent, a token in its query included.
  app.setNotFoundHandler((request, reply) => {
    const message = `Route ${request.method}:${withoutSecrets(request.url)} not found`;
    request.log.info(message);
    return reply.code(404).send({ message, error: "Not Found", statusCode: 404 });
  });
  const limits: ServerLimits = { ...DEFAULT_LIMITS, ...pickLimits(options) };
  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: limits.maxFrameBytes,
    perMessageDeflate: false,
  });
  const state = serverState(app, options, limits, guard, wss);
  registerRoutes(app, state);
  registerWeb(app, state, webOptions(options.share, options.files));
  const openenv = new OpenEnvServer(app, state, guard, options.openenv);
  const stopHeartbeat = heartbeat(() => wss.clients, guard.limits.heartbeatMs);
  attachSockets({ app, state, guard, origins, wss, openenv });
  const shutdown = gracefulShutdown(
    { app, state, guard, origins, wss, openenv },
    stopHeartbeat,
    options.closeGraceMs ?? 2_000,
  );
  return {
    app,
    state,
    async listen(port = 0, host = "127.0.0.1") {
      origins.addHost(host);
      const address = await app.listen({ port, host });
      return address;
    },
    shutdown,
  };
}

/** The server's state: its limits and tokens, the engine, the budgets, the rollouts' context. */
function serverState(
  app: FastifyInstance,
  options: ServerOptions,
  limits: ServerLimits,
  guard: ConnectionGuard,
  wss: WebSocketServer,
): ServerState {
  const sessions = new Map<string, Session>();
  const metrics = createMetrics({
    queuedGroups: () => [...sessions.values()].reduce((n, s) => n + s.unacknowledgedGroups, 0),
    connectedClients: () => wss.clients.size,
    replicas: () => options.policy?.replicas?.() ?? [],
    updates: () => updates.gauges(),
  });
  const registry = options.registry ?? createRegistry();
  const policy = instrumentPolicy(options.policy ?? oraclePolicy(), metrics);
  const watch = new WatchHub(options.watch ?? {}, guard);
  const updates = new UpdateCoordinator(policy, metrics, {
    maxUpdateMs: limits.maxUpdateMs,
    log: app.log,
    resumeGraceMs: limits.resumeGraceMs,
  });
  // Fixed once built: every hello gets one of these two.
  const parts = { server: limits, connections: guard.limits, watch: watch.limits };
  const welcome = { client: welcomeLimits(parts), trainer: welcomeLimits(parts, true) };
  const state: ServerState = {
    options: {
      ...limits,
      token: options.token ?? null,
      trainerToken: trainerTokenOf(options.trainerToken),
      groupConcurrency: options.groupConcurrency ?? 64,
      shutdownDeadlineMs: options.shutdownDeadlineMs ?? 30_000,
    },
    config: options.config ?? defaultConfig(),
    registry,
    policy,
    metrics,
    sessions,
    episodesInFlight: 0,
    memory: new MemoryBudget(limits.maxHeldBytes, limits.maxHeldBytesPerConnection, () =>
      admitWaiting(state),
    ),
    closing: false,
    version: VERSION,
    log: app.log,
    rolloutContext: {
      registry,
      policy,
      metrics,
      maxBufferedGroups: limits.maxBufferedGroups,
      groupConcurrency: options.groupConcurrency ?? 64,
      watch,
      updates,
    },
    updates,
    limits: (trainer) => (trainer ? welcome.trainer : welcome.client),
  };
  return state;
}

/** /healthz, /metrics and /v1/envs. */
function registerRoutes(app: FastifyInstance, state: ServerState): void {
  const { policy, metrics, registry } = state;
  app.get("/healthz", async (_request, reply) => {
    // An open weight update holds every new group: not down, but said (docs/server.md "Routes").
    const update = state.updates.status();
    // Closing takes no new clients: 503, so readiness probes and load balancers send none here.
    if (state.closing) reply.code(503);
    return {
      status: state.closing ? "closing" : update ? "updating" : "ok",
      version: VERSION,
      ...(update ? { update } : {}),
      // What rollouts wait on at the engine (retries, replicas down), when the policy is remote.
      ...(policy.engineStatus ? { engine: policy.engineStatus() } : {}),
    };
  });
  app.get("/metrics", async (_request, reply) => {
    reply.header("content-type", metrics.registry.contentType);
    return metrics.registry.metrics();
  });
  app.get("/v1/envs", async () => ({
    envs: registry.tagNames().map((tag) => {
      const t = registry.tag(tag);
      return {
        tag,
        env_type: t.spec.env_type,
        max_actions_per_traj: t.spec.max_actions_per_traj,
        max_tokens: t.spec.max_tokens,
        config: withoutUrlSecrets(t.config),
      };
    }),
  }));
}

/** A tag's config as the page sees it: a remote tag's url/urls without their tokens. */
function withoutUrlSecrets(config: object): object {
  const shown: Record<string, unknown> = { ...config };
  if (typeof shown.url === "string") shown.url = withoutSecrets(shown.url);
  if (Array.isArray(shown.urls))
    shown.urls = shown.urls.map((u) => (typeof u === "string" ? withoutSecrets(u) : u));
  return shown;
}

/** What the socket and shutdown steps share. */
interface ServerParts {
  app: FastifyInstance;
  state: ServerState;
  guard: ConnectionGuard;
  origins: OriginPolicy;
  wss: WebSocketServer;
  openenv: OpenEnvServer;
}

/** The WebSocket routes: /v1/rollouts and OpenEnv's, each upgrade checked before it is taken. */
function attachSockets({ app, state, guard, origins, wss, openenv }: ServerParts): void {
  wss.on("connection", (socket: WebSocket, request: IncomingMessage) =>
    handleConnection(state, socket, guard.opened(socket, request)),
  );
  app.server.on("upgrade", (request: IncomingMessage, socket: Duplex, head: Buffer) => {
    const path = new URL(request.url ?? "/", "http://localhost").pathname;
    const target = path === "/v1/rollouts" ? wss : openenv.socketServer(path);
    if (target instanceof RollgymError) return refuseUpgrade(socket, target);
    if (state.closing) return refuseUpgrade(socket, new RollgymError("closing", {}));
    const foreign = origins.refusal(request, state.options.token !== null);
    if (foreign !== null)
      return refuseUpgrade(socket, new RollgymError("foreign_origin", { message: foreign }));
    if (!authorized(request, state.options.token) && !openenv.pathAuthorized(path, state.options.token))
      return refuseUpgrade(socket, new RollgymError("unauthorized", { query: false }));
    // A storm of handshakes is spread over turns of the event loop (connections.ts).
    guard.upgrade(() => {
      if (socket.destroyed) return;
      const over = guard.refusal(request);
      if (over) return refuseUpgrade(socket, over);
      target.handleUpgrade(request, socket, head, (ws) => target.emit("connection", ws, request));
    });
  });
}

/** RollgymServer.shutdown: the first call shuts down gracefully, a second one hurries it. */
function gracefulShutdown(
  { app, state, guard, wss, openenv }: ServerParts,
  stopHeartbeat: () => void,
  closeGraceMs: number,
): (reason?: string) => Promise<ShutdownReport> {
  let shuttingDown: Promise<ShutdownReport> | null = null;
  let hurry = () => {};
  const hurried = new Promise<void>((resolve) => {
    hurry = resolve;
  });
  return (reason = "server shutting down"): Promise<ShutdownReport> => {
    if (shuttingDown) {
      hurry();
      return shuttingDown;
    }
    shuttingDown = (async () => {
      state.closing = true;
      stopHeartbeat();
      const deadline = state.options.shutdownDeadlineMs;
      for (const ws of wss.clients)
        ws.send(encodeMessage({ type: "closing", reason, deadline_ms: deadline }));
      const rollouts = [...state.sessions.values()].flatMap((s) => [...s.rollouts.values()]);
      const running = rollouts.map((r) => r.done);
      let finished = false;
      const allFinished = Promise.all(running).then(() => {
        finished = true;
      });
      await Promise.race([allFinished, sleep(deadline), hurried]);
      const cancelled = finished ? 0 : rollouts.filter((r) => r.batch === null).length;
      for (const session of state.sessions.values()) {
        for (const rollout of session.rollouts.values()) rollout.cancel();
      }
      // Cancelled rollouts still send their batch frames before the sockets close; one stuck
      // behind a client that does not read gets the grace period and no more.
      await Promise.race([allFinished, sleep(closeGraceMs)]);
      for (const session of state.sessions.values()) session.flushVerdicts();
      // A client that does not read never answers the close: its connection is dropped.
      const dropped = await Promise.all([
        ...[...wss.clients].map((ws) => closeWithin(ws, CLOSE_CODES.goingAway, reason, closeGraceMs)),
        ...openenv.close(reason, closeGraceMs),
      ]);
      for (const session of [...state.sessions.values()]) session.end();
      // Half-sent requests and idle keep-alive connections would hold the close until they time out.
      guard.dropPending();
      const closed = app.close();
      await Promise.race([closed, sleep(closeGraceMs)]);
      app.server.closeAllConnections();
      await closed;
      await state.policy.close?.();
      return { cancelled, dropped: dropped.filter(Boolean).length };
    })();
    return shuttingDown;
  };
}

/** The trainer token, refused when no hello could carry it. */
function trainerTokenOf(token: string | null | undefined): string | null {
  if (token === undefined || token === null) return null;
  if (token.length === 0 || token.length > MAX_TRAINER_TOKEN_LENGTH)
    throw new RangeError(
      `trainerToken: ${token.length} characters; a hello carries 1 to ${MAX_TRAINER_TOKEN_LENGTH} (hello.trainer_token)`,
    );
  return token;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}

/** Answers an upgrade refused with `error` (its HTTP status from errors/catalogue.ts) and closes. */
function refuseUpgrade(socket: Duplex, error: RollgymError): void {
  const { status, body } = httpRefusal(error)!;
  const json = JSON.stringify(body);
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(json)}\r\nConnection: close\r\n\r\n${json}`,
  );
}

/** Request logs name the URL without its token (the page's `token` parameter, OpenEnv's /t/TOKEN). */
function loggerWithoutSecrets(logger: boolean | { level: string }): boolean | object {
  if (logger === false) return false;
  return {
    ...(logger === true ? {} : logger),
    serializers: {
      req: (request: { method: string; url: string; ip?: string }) => ({
        method: request.method,
        url: withoutSecrets(request.url),
        remoteAddress: request.ip,
      }),
    },
  };
}

function pickLimits(options: ServerOptions): Partial<ServerLimits> {
  const keys = Object.keys(DEFAULT_LIMITS) as (keyof ServerLimits)[];
  const { maxEnvBytes, maxEnvBytesPerConnection } = options;
  return {
    ...(maxEnvBytes === undefined ? {} : { maxHeldBytes: maxEnvBytes }),
    ...(maxEnvBytesPerConnection === undefined
      ? {}
      : { maxHeldBytesPerConnection: maxEnvBytesPerConnection }),
    ...Object.fromEntries(keys.filter((k) => options[k] !== undefined).map((k) => [k, options[k]])),
  };
}

/**
 * JSON bodies (OpenEnv's POST routes, the page's) go through fastify's own parser once their
 * nesting is known to be within MAX_JSON_DEPTH: a deeper one is a 400 before anything walks it.
 */
function boundJsonBodies(app: FastifyInstance): void {
  const parse = app.getDefaultJsonParser("error", "ignore");
  app.removeContentTypeParser("application/json");
  app.addContentTypeParser("application/json", { parseAs: "string" }, (request, body, done) => {
    const text = body as string;
    if (deeperThan(text, MAX_JSON_DEPTH) >= 0) {
      const error = new RollgymError("bad_request", {
        message: `the JSON body is nested deeper than ${MAX_JSON_DEPTH} levels`,
      });
      done(Object.assign(error, { statusCode: 400 }), undefined);
      return;
    }
    parse(request, text, done);
  });
}
