// rollgym's tags as OpenEnv environments (docs/openenv.md): each registered tag answers at
// /openenv/TAG the way an OpenEnv server answers at its root — WebSocket sessions on
// /openenv/TAG/ws and the HTTP routes health, schema, metadata, state, reset, step — so an
// OpenEnv client given the base URL http://HOST:PORT/openenv/TAG plays it; behind `serve --token`,
// the base URL http://HOST:PORT/openenv/TAG/t/TOKEN carries the token in the socket's path
// (OpenEnv's client sends no headers and appends /ws after any query). One process serves
// many sessions of every tag at once, each with its own env. The upgrade goes through app.ts's
// checks (closing, Origin/Host, token, connection caps); frames are capped at max_frame_bytes
// and replies go out through Outbound's backpressure like every other socket's.
import { randomInt, randomUUID } from "node:crypto";
import type { IncomingMessage } from "node:http";
import type { FastifyInstance, FastifyReply } from "fastify";
import { type RawData, type WebSocket, WebSocketServer } from "ws";
import type { ResolvedTag } from "../../envs/registry.ts";
import { unknownTagMessage } from "../../envs/registry.ts";
import type { Env, StepResult } from "../../envs/types.ts";
import { EpisodeStatistics } from "../../envs/wrappers/episode-statistics.ts";
import type { EnvRuleError } from "../../envs/wrappers/wrapper.ts";
import { parseJson, preview } from "../../protocol/bounded-json.ts";
import { CLOSE_CODES } from "../../protocol/codec.ts";
import {
  checkMessage,
  checkWith,
  errorFrame,
  type FieldError,
  OPENENV_MESSAGE_TYPES,
  OPENENV_MODELS,
  type OpenEnvClientMessage,
  ResetRequestSchema,
  StepRequestSchema,
  validationFrame,
} from "../../protocol/openenv.ts";
import { type LimitValues, MAX_SEED } from "../../protocol/settings.ts";
import { messageOf } from "../errors/boundary.ts";
import { RollgymError } from "../errors/catalogue.ts";
import { mapActions } from "../rollout/parse.ts";
import { sameSecret } from "./auth.ts";
import { type ConnectionGuard, type ConnectionTicket, closeWithin, heartbeat } from "./connections.ts";
import { limitDefaults } from "./limits.ts";
import { OPENENV_SESSION_BYTES } from "./memory-costs.ts";
import { Outbound } from "./outbound.ts";
import type { ServerState } from "./state.ts";

/** rollgym's OpenEnv server's limits (protocol/settings.ts LIMITS, part "openenv"), by option name. */
export type OpenEnvLimits = LimitValues<"openenv">;

export const DEFAULT_OPENENV_LIMITS: OpenEnvLimits = limitDefaults("openenv");

const PREFIX = "/openenv";

/** What reset and step answer: OpenEnv's `{observation, reward, done}`. */
interface ObservationData {
  observation: { text: string; actions: string[]; truncated: boolean; info: Record<string, unknown> };
  reward: number | null;
  done: boolean;
}

/** How the OpenEnv protocol words the env rules a step can break (envs/wrappers). */
const REFUSALS: Partial<Record<EnvRuleError["rule"], string>> = {
  reset_needed: "no episode yet: send reset first",
  episode_done: "the episode is over (done); send reset for a new one",
};

/** A session's env (the registry's, counting its steps) and the seed and id of its episode. */
class Episode {
  readonly tag: ResolvedTag;
  readonly env: EpisodeStatistics<Env>;
  private seed: number | null = null;
  private id: string | null = null;

  constructor(tag: ResolvedTag) {
    this.tag = tag;
    this.env = new EpisodeStatistics(tag.make());
  }

  reset(seed: number | null, id: string | null): ObservationData {
    // OpenEnv envs draw a seed when given none; rollgym reports the one it drew in `state`.
    this.seed = seed ?? randomInt(0, MAX_SEED + 1);
    this.id = id ?? randomUUID();
    const text = this.env.reset(this.seed);
    return {
      observation: { text, actions: [...this.env.actionNames], truncated: false, info: {} },
      reward: null,
      done: false,
    };
  }

  /** The action's id, or why the name is not one (naming the allowed ones). */
  actionId(name: string): number | FieldError[] {
    const { ids } = mapActions([name], this.env.actionNames);
    if (ids.length === 1) return ids[0];
    return [
      {
        type: "enum",
        loc: ["data", "action"],
        msg: `${JSON.stringify(name)} is not an action of ${this.tag.spec.tag}; allowed: ${this.env.actionNames.join(", ")}`,
        input: name,
      },
    ];
  }

  /** Why the env refuses any step now (no reset yet, the episode over), in OpenEnv's words. */
  refusal(): string | null {
    const refused = this.env.refusal();
    return refused && (REFUSALS[refused.rule] ?? refused.message);
  }

  step(id: number): ObservationData {
    const result: StepResult = this.env.step(id);
    return {
      observation: {
        text: result.observation,
        actions: [...this.env.actionNames],
        truncated: result.truncated,
        info: { ...result.info },
      },
      reward: result.reward,
      done: this.env.done,
    };
  }

  state(): Record<string, unknown> {
    if (this.seed === null) return freshState(this.tag);
    return {
      ...freshState(this.tag),
      episode_id: this.id,
      step_count: this.env.episodeLength,
      seed: this.seed,
      done: this.env.done,
    };
  }
}

/** OpenEnv's State before any reset. */
function freshState(tag: ResolvedTag): Record<string, unknown> {
  return {
    episode_id: null,
    step_count: 0,
    tag: tag.spec.tag,
    seed: null,
    done: false,
    max_actions_per_traj: tag.spec.max_actions_per_traj,
  };
}

export class OpenEnvServer {
  readonly limits: OpenEnvLimits;
  private readonly state: ServerState;
  private readonly wss: WebSocketServer;
  private readonly stopHeartbeat: () => void;
  /** Sessions open (sockets past the capacity check). */
  private active = 0;

  constructor(
    app: FastifyInstance,
    state: ServerState,
    guard: ConnectionGuard,
    limits: Partial<OpenEnvLimits> = {},
  ) {
    this.limits = { ...DEFAULT_OPENENV_LIMITS, ...limits };
    this.state = state;
    this.wss = new WebSocketServer({
      noServer: true,
      maxPayload: state.options.maxFrameBytes,
      perMessageDeflate: false,
    });
    this.wss.on("connection", (ws: WebSocket, request: IncomingMessage) =>
      this.session(ws, request, guard.opened(ws, request)),
    );
    this.stopHeartbeat = heartbeat(() => this.wss.clients, guard.limits.heartbeatMs);
    this.routes(app);
  }

  /**
   * The socket server for an upgrade to `path` when it is an OpenEnv session's, or why the path
   * has no WebSocket route (app.ts refuses the upgrade with it: 404).
   */
  socketServer(path: string): WebSocketServer | RollgymError {
    const tag = tagInPath(path);
    if (tag === null) return new RollgymError("no_ws_route", {});
    if (!this.state.registry.hasTag(tag))
      return new RollgymError("unknown_tag", {
        message: unknownTagMessage(tag, this.state.registry.tagNames()),
      });
    return this.wss;
  }

  /**
   * Whether `path` carries `expected` as its /t/TOKEN segment (OpenEnv's client can send the
   * token no other way); compared in constant time.
   */
  pathAuthorized(path: string, expected: string | null): boolean {
    const token = sessionPath(path)?.token;
    return expected !== null && token !== undefined && token !== null && sameSecret(token, expected);
  }

  /** Closes every session (at shutdown); each promise says whether its client had to be dropped. */
  close(reason: string, graceMs: number): Promise<boolean>[] {
    this.stopHeartbeat();
    return [...this.wss.clients].map((ws) => closeWithin(ws, CLOSE_CODES.goingAway, reason, graceMs));
  }

  /** One socket: a session of the tag its path names, its messages answered in order. */
  private session(ws: WebSocket, request: IncomingMessage, ticket: ConnectionTicket): void {
    const path = new URL(request.url ?? "/", "http://localhost").pathname;
    // socketServer let the upgrade through only for a registered tag's path.
    const tag = this.state.registry.tag(tagInPath(path)!);
    // ws reports an oversized or malformed frame here as it closes the socket (1009, 1002);
    // without a listener it would be an uncaught exception.
    ws.on("error", (error) => this.state.log.warn({ err: error }, "openenv socket error"));
    const out = new Outbound(ws, this.state.options);
    // Like OpenEnv, the socket is accepted first and a full server says so on it: full of
    // sessions, or of memory (each session is charged to the server's max_held_bytes).
    const active = this.active;
    const memory = this.state.memory.account();
    const overBudget = this.state.memory.refusal(memory, OPENENV_SESSION_BYTES, "an OpenEnv session");
    if (active >= this.limits.maxSessions || overBudget !== null) {
      memory.close();
      out.sendEncoded(
        errorFrame(
          "CAPACITY_REACHED",
          overBudget === null
            ? `Server at capacity: ${active}/${this.limits.maxSessions} sessions active. Cannot accept new connections.`
            : `Server at capacity: ${overBudget}. Cannot accept new connections.`,
          { active_sessions: active, max_sessions: this.limits.maxSessions },
        ),
      );
      ws.close(CLOSE_CODES.normal, "at capacity");
      return;
    }
    memory.charge("env", OPENENV_SESSION_BYTES);
    this.active++;
    const episode = new Episode(tag);
    // Only reset and step are work: they keep the session from env_idle_s and, at
    // max_connections, from being dropped as idle (4011). An open episode holds nothing beyond
    // its steps (ticket.holding stays false), and `state` or a refused message asks for nothing,
    // so neither keeps a socket for ever (issue 28.4).
    const idleMs = this.state.options.envIdleMs;
    const idle = setTimeout(() => {
      out.sendEncoded(
        errorFrame("SESSION_ERROR", `no reset or step for ${idleMs / 1000} s (env_idle_s); session closed`),
      );
      ws.close(CLOSE_CODES.normal, "idle");
    }, idleMs).unref();
    const worked = () => {
      idle.refresh();
      ticket.worked();
    };
    ws.once("close", () => {
      this.active--;
      memory.close();
      clearTimeout(idle);
    });

    const answer = (message: OpenEnvClientMessage): string | null => {
      switch (message.type) {
        case "reset":
          worked();
          return observationFrame(
            episode.reset(message.data?.seed ?? null, message.data?.episode_id ?? null),
          );
        case "step": {
          const refused = episode.refusal();
          if (refused !== null) return errorFrame("EXECUTION_ERROR", refused);
          const id = episode.actionId(message.data.action);
          if (typeof id !== "number") return validationFrame(id);
          worked();
          return observationFrame(episode.step(id));
        }
        case "state":
          return JSON.stringify({ type: "state", data: episode.state() });
        case "close":
          ws.close(CLOSE_CODES.normal, "closed by the client");
          return null;
      }
    };

    ws.on("message", (data: RawData, isBinary: boolean) => {
      out.whenFlowing(() => {
        // A throw ends this session only, never the process (its env may have raised anything).
        try {
          const reply = this.reply(data, isBinary, ticket, answer);
          if (reply !== null) out.sendEncoded(reply);
        } catch (error) {
          this.state.log.error({ err: error }, "openenv frame handler failed");
          ws.close(CLOSE_CODES.internalError, "internal error");
        }
      });
    });
  }

  /** The answer to one frame; env failures become EXECUTION_ERROR, bad input the error that names it. */
  private reply(
    data: RawData,
    isBinary: boolean,
    ticket: ConnectionTicket,
    answer: (message: OpenEnvClientMessage) => string | null,
  ): string | null {
    if (isBinary)
      return errorFrame("INVALID_JSON", "Invalid JSON: binary frame; OpenEnv messages are JSON text frames");
    let value: unknown;
    try {
      value = parseJson(rawText(data));
    } catch (error) {
      return errorFrame("INVALID_JSON", `Invalid JSON: ${messageOf(error)}`);
    }
    const checked = checkMessage(value);
    if (!checked.ok)
      return "unknownType" in checked
        ? errorFrame(
            "UNKNOWN_TYPE",
            `Unknown message type: ${preview(checked.unknownType)}; allowed: ${OPENENV_MESSAGE_TYPES.join(", ")}`,
          )
        : validationFrame(checked.errors);
    // A well-formed message is this protocol's hello: the socket is no longer a silent one.
    ticket.hello();
    try {
      return answer(checked.value);
    } catch (error) {
      return errorFrame("EXECUTION_ERROR", messageOf(error));
    }
  }

  private routes(app: FastifyInstance): void {
    const tagOf = (name: string, reply: FastifyReply): ResolvedTag | null => {
      if (this.state.registry.hasTag(name)) return this.state.registry.tag(name);
      void reply.code(404).send({ detail: unknownTagMessage(name, this.state.registry.tagNames()) });
      return null;
    };
    type TagRequest = { Params: { tag: string } };

    app.get(PREFIX, async () => ({
      envs: this.state.registry
        .tagNames()
        .map((tag) => ({ tag, base_path: `${PREFIX}/${encodeURIComponent(tag)}` })),
      active_sessions: this.active,
      max_sessions: this.limits.maxSessions,
    }));
    app.get<TagRequest>(`${PREFIX}/:tag/health`, async (request, reply) => {
      if (!tagOf(request.params.tag, reply)) return reply;
      return { status: this.state.closing ? "unhealthy" : "healthy" };
    });
    app.get<TagRequest>(`${PREFIX}/:tag/metadata`, async (request, reply) => {
      const tag = tagOf(request.params.tag, reply);
      if (!tag) return reply;
      return {
        name: tag.spec.tag,
        description: `${tag.type.description} rollgym tag ${tag.spec.tag} (env_type ${tag.spec.env_type}).`,
        version: this.state.version,
      };
    });
    app.get<TagRequest>(`${PREFIX}/:tag/schema`, async (request, reply) => {
      if (!tagOf(request.params.tag, reply)) return reply;
      return OPENENV_MODELS;
    });
    app.get<TagRequest>(`${PREFIX}/:tag/state`, async (request, reply) => {
      const tag = tagOf(request.params.tag, reply);
      return tag ? freshState(tag) : reply;
    });
    // The /t/TOKEN form is the socket's alone; answered here, not by fastify's 404, whose log
    // line would name the URL, token and all.
    app.all(`${PREFIX}/:tag/t/*`, async (_request, reply) =>
      reply.code(404).send({
        detail: `${PREFIX}/TAG/t/TOKEN is a base URL for WebSocket sessions only (upgrade on …/ws); the HTTP routes are at ${PREFIX}/TAG/…`,
      }),
    );
    // OpenEnv's HTTP reset builds a fresh env for the call: the first observation of a seed.
    app.post<TagRequest & { Body: unknown }>(`${PREFIX}/:tag/reset`, async (request, reply) => {
      const tag = tagOf(request.params.tag, reply);
      if (!tag) return reply;
      const checked = checkWith(ResetRequestSchema, request.body ?? {}, ["body"]);
      if (!checked.ok) return reply.code(422).send({ detail: checked.errors });
      return new Episode(tag).reset(checked.value.seed ?? null, checked.value.episode_id ?? null);
    });
    // OpenEnv's HTTP step steps a fresh env; a rollgym env has no episode before a seeded reset.
    app.post<TagRequest & { Body: unknown }>(`${PREFIX}/:tag/step`, async (request, reply) => {
      if (!tagOf(request.params.tag, reply)) return reply;
      const checked = checkWith(StepRequestSchema, request.body ?? {}, ["body"]);
      if (!checked.ok) return reply.code(422).send({ detail: checked.errors });
      return reply.code(409).send({
        detail: `POST ${PREFIX}/${request.params.tag}/step would step a fresh, never reset env: rollgym episodes need a seeded reset, so they live on ${PREFIX}/${request.params.tag}/ws (send reset, then step)`,
      });
    });
  }
}

/** The tag a /openenv/TAG/ws path names (percent-decoded), or null for any other path. */
function tagInPath(path: string): string | null {
  return sessionPath(path)?.tag ?? null;
}

/**
 * The tag and token of a session's path, /openenv/TAG/ws or /openenv/TAG/t/TOKEN/ws (both
 * percent-decoded; token null in the first form), or null for any other path.
 */
function sessionPath(path: string): { tag: string; token: string | null } | null {
  const match = /^\/openenv\/([^/]+)(?:\/t\/([^/]+))?\/ws$/.exec(path);
  if (match === null) return null;
  try {
    return {
      tag: decodeURIComponent(match[1]),
      token: match[2] === undefined ? null : decodeURIComponent(match[2]),
    };
  } catch {
    return null; // a malformed escape (%E0) names nothing
  }
}

function observationFrame(data: ObservationData): string {
  return JSON.stringify({ type: "observation", data });
}

function rawText(data: RawData): string {
  if (Array.isArray(data)) return Buffer.concat(data).toString("utf8");
  return Buffer.from(data as ArrayBuffer).toString("utf8");
}
