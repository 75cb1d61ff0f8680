// One WebSocket connection: the handshake, then every client frame validated and dispatched.
// A bad frame gets an `error` reply and the connection carries on; an undecodable one closes
// only this connection. Nothing a client sends can take the server down.
import type { RawData, WebSocket } from "ws";
import { unknownTagMessage } from "../../envs/registry.ts";
import { CLOSE_CODES, decodeFrame } from "../../protocol/codec.ts";
import { type ClientMessage, hasFrameEnvelope, validateClientMessage } from "../../protocol/messages.ts";
import { PROTOCOL_VERSION } from "../../protocol/version.ts";
import type { TokenEngine } from "../llm/token-engine.ts";
import { groupLocalScores, policyRefusal, validateBatchRequest } from "../rollout/batch.ts";
import { checkRolloutShape, RolloutLimitError, type RolloutLimits } from "../rollout/limits.ts";
import { budgetRefusal, budgetReporter, holdWhenRoom } from "./budget.ts";
import type { ConnectionTicket } from "./connections.ts";
import { EnvHostError, HostedEnvs } from "./env-host.ts";
import { Outbound } from "./outbound.ts";
import { envOpenRequest, rolloutBatchRequest } from "./requests.ts";
import { runRollout } from "./rollouts.ts";
import { Session } from "./session.ts";
import type { ServerState } from "./state.ts";

type ErrorCode = string;

/** `ticket` hears of the hello and of every frame, and asks whether the connection holds work. */
export function handleConnection(state: ServerState, socket: WebSocket, ticket?: ConnectionTicket): void {
  let session: Session | null = null;
  const hosted = new Map<string, HostedEnvs>();
  if (ticket)
    ticket.holding = () =>
      hosted.size > 0 ||
      state.rolloutContext.watch?.watching(socket) === true ||
      [...(session?.rollouts.values() ?? [])].some((r) => r.batch === null);
  // Every reply goes through `out`, which watches the socket's buffered bytes (outbound.ts).
  const out = new Outbound(socket, state.options);

  const reply = (frame: Record<string, unknown>) => {
    out.send(frame);
  };
  const fail = (code: ErrorCode, message: string, extra: Record<string, unknown> = {}) =>
    reply({ type: "error", code, message, ...extra });

  // A frame that arrives while the client's replies pile up waits, in order, until they drain.
  socket.on("message", (data: RawData, isBinary: boolean) => {
    ticket?.touch();
    out.whenFlowing(() => handleFrame(data, isBinary));
  });

  const handleFrame = (data: RawData, isBinary: boolean): void => {
    if (!isBinary) {
      socket.close(CLOSE_CODES.undecodable, "text frames are not part of the protocol; send binary msgpack");
      return;
    }
    let value: unknown;
    try {
      value = decodeFrame(toBytes(data), "client");
    } catch (error) {
      socket.close(
        CLOSE_CODES.undecodable,
        truncate(`undecodable frame: ${error instanceof Error ? error.message : error}`),
      );
      return;
    }
    if (!hasFrameEnvelope(value)) {
      socket.close(CLOSE_CODES.undecodable, "every frame must be a msgpack map with a string type");
      return;
    }
    const checked = validateClientMessage(value);
    if (!checked.ok) {
      if (!session) {
        socket.close(
          CLOSE_CODES.noHello,
          truncate(`the first frame must be a valid hello: ${checked.message}`),
        );
        return;
      }
      // Name the rollout or env session the bad frame was about, when it says so.
      const about = value as { type: string; id?: unknown };
      const owner =
        typeof about.id !== "string"
          ? {}
          : about.type === "rollout"
            ? { rollout: about.id }
            : about.type.startsWith("env_")
              ? { id: about.id }
              : {};
      fail(checked.code, checked.message, { field: checked.field, ...owner });
      return;
    }
    const message = checked.message;
    try {
      if (!session) {
        session = handshake(state, socket, message, reply, out);
        if (session) ticket?.hello();
        return;
      }
      if (message.type === "watch" || message.type === "unwatch") watch(state, socket, message.type, fail);
      else dispatch(state, session, hosted, message, fail, reply, out);
    } catch (error) {
      state.log.error({ err: error }, "frame handler failed");
      fail("internal", error instanceof Error ? error.message : String(error));
    }
  };

  socket.on("close", (code: number) => {
    state.rolloutContext.watch?.unsubscribe(socket);
    const current = session as Session | null;
    if (current) for (const [id, envs] of hosted) dropHosted(hosted, current, id, envs);
    if (current && state.sessions.get(current.id) === current && !state.closing) {
      // A client that said goodbye (1000) with nothing held has nothing to resume.
      if (code === 1000 && current.idle) current.end();
      else current.detach(out, state.options.resumeGraceMs);
    }
  });
  socket.on("error", (error) => state.log.warn({ err: error }, "socket error"));
}

/** Why `tokens: true` is refused: token mode renders and samples through the server's engine. */
function needsEngine(state: ServerState): string {
  return `tokens: true needs the server to run against a remote engine (--llm); it serves the built-in ${state.rolloutContext.policy.name} policy`;
}

function handshake(
  state: ServerState,
  socket: WebSocket,
  message: ClientMessage,
  reply: (frame: Record<string, unknown>) => void,
  out: Outbound,
): Session | null {
  if (message.type !== "hello") {
    socket.close(CLOSE_CODES.noHello, `the first frame must be hello, not ${message.type}`);
    return null;
  }
  if (message.protocol !== PROTOCOL_VERSION) {
    reply({
      type: "error",
      code: "protocol_version",
      message: `client speaks protocol ${message.protocol}, server speaks ${PROTOCOL_VERSION}`,
    });
    socket.close(CLOSE_CODES.versionMismatch, "protocol version mismatch");
    return null;
  }
  let session: Session;
  let resumed = false;
  if (message.resume !== undefined) {
    const found = state.sessions.get(message.resume);
    if (!found) {
      reply({
        type: "error",
        code: "unknown_session",
        message: `session ${message.resume} is unknown or expired (sessions live ${state.options.resumeGraceMs / 1000} s after a disconnect)`,
      });
      socket.close(CLOSE_CODES.resumeRefused, "resume refused");
      return null;
    }
    session = found;
    resumed = true;
  } else {
    session = new Session(budgetReporter(state));
    state.sessions.set(session.id, session);
    session.onEnd = () => state.sessions.delete(session.id);
  }
  reply({
    type: "welcome",
    protocol: PROTOCOL_VERSION,
    server: `rollgym/${state.version}`,
    session: session.id,
    resumed,
    envs: state.registry.tagNames(),
    limits: state.limits(),
  });
  session.attach(out, resumed);
  return session;
}

/** Watch subscriptions belong to the connection, not the session: they are not resumed. */
function watch(
  state: ServerState,
  socket: WebSocket,
  type: "watch" | "unwatch",
  fail: (code: ErrorCode, message: string, extra?: Record<string, unknown>) => void,
): void {
  const hub = state.rolloutContext.watch;
  if (type === "unwatch") hub?.unsubscribe(socket);
  else if (!hub?.subscribe(socket))
    fail("limit", `max_watchers is ${hub?.limits.maxWatchers ?? 0}; every watch subscription is taken`);
}

function dispatch(
  state: ServerState,
  session: Session,
  hosted: Map<string, HostedEnvs>,
  message: ClientMessage,
  fail: (code: ErrorCode, message: string, extra?: Record<string, unknown>) => void,
  reply: (frame: Record<string, unknown>) => void,
  out: Outbound,
): void {
  const { options } = state;
  switch (message.type) {
    case "hello":
      fail("bad_frame", "hello was already received on this connection", { field: "type" });
      return;
    case "credit":
      session.grant(message.groups);
      return;
    case "ack": {
      const unknown = session.ack(message.rollout, message.groups, message.batch === true);
      if (unknown.length > 0) {
        fail(
          "unknown_group",
          `groups ${unknown.join(", ")} of rollout ${message.rollout} are not awaiting acknowledgement`,
          {
            rollout: message.rollout,
          },
        );
      }
      return;
    }
    case "cancel": {
      const rollout = session.rollouts.get(message.rollout);
      if (!rollout) {
        fail("unknown_rollout", `no rollout ${JSON.stringify(message.rollout)} in this session`, {
          rollout: message.rollout,
        });
        return;
      }
      rollout.abort.abort();
      for (const wake of rollout.waiters.splice(0)) wake();
      return;
    }
    case "rollout": {
      if (state.closing) {
        fail("shutting_down", "the server is shutting down and takes no new rollouts", {
          rollout: message.id,
        });
        return;
      }
      // An id stays taken while its rollout runs, its batch frame is unconfirmed or any of its
      // groups is unacknowledged, so acknowledgements and resends can never mix two rollouts.
      if (session.holdsRollout(message.id)) {
        fail(
          "duplicate_id",
          `rollout id ${JSON.stringify(message.id)} is already in use in this session (running, or with unacknowledged groups or batch frame)`,
          { rollout: message.id },
        );
        return;
      }
      if (session.unacknowledgedGroups >= options.maxUnackedGroups) {
        fail(
          "limit",
          `max_unacked_groups is ${options.maxUnackedGroups}; this session holds ${session.unacknowledgedGroups} unacknowledged groups: acknowledge some first`,
          { rollout: message.id },
        );
        return;
      }
      const live = [...session.rollouts.values()].filter((r) => r.batch === null).length;
      if (live >= options.maxRolloutsPerConnection) {
        fail(
          "limit",
          `max_rollouts_per_connection is ${options.maxRolloutsPerConnection}; wait for one to finish`,
          {
            rollout: message.id,
          },
        );
        return;
      }
      const groups = message.tags.reduce((n, t) => n + t.groups, 0);
      const unknownTag = message.tags.find((t) => !state.registry.hasTag(t.tag));
      if (unknownTag) {
        fail("unknown_tag", unknownTagMessage(unknownTag.tag, state.registry.tagNames()), {
          rollout: message.id,
          field: "tags",
        });
        return;
      }
      const episodes = groups * message.group_size;
      let request: ReturnType<typeof rolloutBatchRequest>;
      try {
        request = rolloutBatchRequest(state.config, message);
        // The same limits and seed range the CLI checks (src/rollout/limits.ts).
        checkRolloutShape(request, shapeOnly(options));
      } catch (error) {
        if (!(error instanceof RolloutLimitError)) throw error;
        fail(error.code, error.message, { rollout: message.id, field: error.field });
        return;
      }
      // Batch delivery holds the whole batch from the start; a stream rollout holds each group
      // from just before it starts until it is acknowledged, so it needs room for one now.
      const stream = message.delivery === "stream";
      const over = stream
        ? budgetRefusal(state, session, message.group_size, "a stream rollout's next group")
        : budgetRefusal(state, session, episodes, "this batch-delivery rollout");
      if (over) {
        fail("limit", over.message, { rollout: message.id, field: "group_size" });
        return;
      }
      try {
        validateBatchRequest(request);
        if (message.delivery === "stream" && !groupLocalScores(request)) {
          throw new RangeError(
            "stream delivery needs scores that are final when a group finishes: use reward_normalization grouping state or method identity",
          );
        }
        if (request.tokens && !state.rolloutContext.policy.tokenEngine?.())
          throw new RangeError(needsEngine(state));
        const refusal = policyRefusal(state.registry, request, state.rolloutContext.policy);
        if (refusal)
          throw new RangeError(`the server's policy ${state.rolloutContext.policy.name}: ${refusal}`);
      } catch (error) {
        fail("bad_frame", error instanceof Error ? error.message : String(error), { rollout: message.id });
        return;
      }
      // Held until the rollout's groups are acknowledged or it ends without them (rollouts.ts).
      if (!stream) session.hold(episodes);
      void runRollout(
        state.rolloutContext,
        session,
        message,
        request,
        stream ? (n, signal) => holdWhenRoom(state, session, n, signal) : null,
      );
      return;
    }
    case "env_open": {
      if (hosted.has(message.id)) {
        fail("duplicate_id", `env session ${JSON.stringify(message.id)} is already open`, { id: message.id });
        return;
      }
      if (hosted.size >= options.maxEnvSessionsPerConnection) {
        fail(
          "limit",
          `max_env_sessions_per_connection is ${options.maxEnvSessionsPerConnection}; close one first`,
          { id: message.id },
        );
        return;
      }
      if (!state.registry.hasTag(message.tag)) {
        fail("unknown_tag", unknownTagMessage(message.tag, state.registry.tagNames()), {
          field: "tag",
        });
        return;
      }
      const hostedRequest = envOpenRequest(state.config, message);
      try {
        // An env session is bounded like a rollout, and its seeds never wrap either.
        checkRolloutShape(hostedRequest, shapeOnly(options));
      } catch (error) {
        if (!(error instanceof RolloutLimitError)) throw error;
        fail(error.code, error.message, {
          id: message.id,
          field: error.field === "tags" ? "groups" : error.field,
        });
        return;
      }
      const over = budgetRefusal(state, session, message.groups * message.group_size, "this env session");
      if (over) {
        fail("limit", over.message, { id: message.id, field: "group_size" });
        return;
      }
      let tokens: TokenEngine | null = null;
      try {
        tokens = message.tokens ? (state.rolloutContext.policy.tokenEngine?.() ?? null) : null;
      } catch (error) {
        // The engine cannot do token mode as configured (rollgym.llm.count_tokens=usage).
        fail("bad_frame", error instanceof Error ? error.message : String(error), {
          field: "tokens",
          id: message.id,
        });
        return;
      }
      if (message.tokens && !tokens) {
        fail("bad_frame", needsEngine(state), { field: "tokens", id: message.id });
        return;
      }
      const envs = new HostedEnvs(
        state.registry,
        hostedRequest,
        tokens,
        `env:${session.id}:${message.id}`,
        (key) => state.rolloutContext.policy.forget?.(key),
        message.messages ?? "new",
        state.envBytes,
      );
      // Its episodes count from now until env_close, the connection's end, or env_idle_s
      // without a step.
      hosted.set(message.id, envs);
      session.hold(envs.size);
      envs.idleTimer = setTimeout(() => {
        if (!dropHosted(hosted, session, message.id, envs)) return;
        fail(
          "limit",
          `env_idle_s is ${options.envIdleMs / 1000}; env session ${JSON.stringify(message.id)} took no step for that long and is closed (its episodes are released): open a new one`,
          { id: message.id, field: "env_idle_s" },
        );
      }, options.envIdleMs);
      envs.idleTimer.unref();
      // Built in slices (the event loop keeps serving); steps and close queue behind the build.
      void out.track(
        envs
          .serial(async () => {
            await envs.build();
            await envs.renderPrompts();
            // A token session's prompt ids are known only now.
            if (state.envBytes.held > options.maxEnvBytes)
              throw new EnvBytesLimit(
                `max_env_bytes is ${options.maxEnvBytes}; this session's prompt token ids (${envs.heldBytes} bytes) would take env sessions over it: open fewer episodes`,
              );
          })
          .then(
            () => reply({ type: "env_opened", id: message.id, episodes: envs.opened() }),
            (error: unknown) => {
              if (!dropHosted(hosted, session, message.id, envs)) return; // closed meanwhile
              if (error instanceof EnvBytesLimit) {
                fail("limit", error.message, { id: message.id, field: "groups" });
                return;
              }
              fail(
                "internal",
                `${envs.tokenSession ? "engine: " : ""}${error instanceof Error ? error.message : String(error)}`,
                { id: message.id },
              );
            },
          ),
      );
      return;
    }
    case "env_step": {
      const envs = hosted.get(message.id);
      if (!envs) {
        fail("unknown_env", `no env session ${JSON.stringify(message.id)} is open on this connection`, {
          id: message.id,
        });
        return;
      }
      const adds = HostedEnvs.bytesOf(message.responses);
      const heldBytes = [...hosted.values()].reduce((n, e) => n + e.heldBytes, 0);
      if (heldBytes + adds > options.maxEnvBytesPerConnection) {
        fail(
          "limit",
          `max_env_bytes_per_connection is ${options.maxEnvBytesPerConnection}; this connection's env sessions hold ${heldBytes} bytes (turn records, responses, token ids) and this step adds ${adds}: close a session first`,
          { id: message.id, field: "responses" },
        );
        return;
      }
      if (state.envBytes.held + adds > options.maxEnvBytes) {
        fail(
          "limit",
          `max_env_bytes is ${options.maxEnvBytes}; env sessions hold ${state.envBytes.held} bytes over all connections and this step adds ${adds}: close a session, or wait for others to`,
          { id: message.id, field: "responses" },
        );
        return;
      }
      // Counted now, so steps queued behind this one are checked against it too.
      envs.charge(adds);
      envs.idleTimer?.refresh();
      const refuse = (error: unknown): void => {
        if (error instanceof EnvHostError) {
          envs.charge(-adds); // refused before anything was applied
          fail(error.code, error.message, { field: "responses", id: message.id });
        } else if (envs.tokenSession) {
          // Its responses are applied but its next ids are not known: the session cannot go on.
          dropHosted(hosted, session, message.id, envs);
          fail(
            "internal",
            `engine: ${error instanceof Error ? error.message : String(error)}; env session ${JSON.stringify(message.id)} is closed, open a new one`,
            { id: message.id },
          );
        } else {
          state.log.error({ err: error }, "env step failed");
          fail("internal", error instanceof Error ? error.message : String(error), { id: message.id });
        }
      };
      void out.track(
        envs
          .serial(async () =>
            envs.tokenSession ? envs.stepTokens(message.responses) : envs.step(message.responses),
          )
          .then((results) => reply({ type: "env_stepped", id: message.id, results }), refuse),
      );
      return;
    }
    case "env_close": {
      const envs = hosted.get(message.id);
      if (!envs) {
        fail("unknown_env", `no env session ${JSON.stringify(message.id)} is open on this connection`, {
          id: message.id,
        });
        return;
      }
      hosted.delete(message.id);
      // A session closes after the steps it has queued (and, when still opening, after its build).
      void out.track(
        envs.serial(async () => {
          reply({ type: "env_closed", id: message.id, ...envs.close() });
          envs.dispose();
          session.release(envs.size);
        }),
      );
      return;
    }
  }
}

/** An env session whose prompt token ids do not fit max_env_bytes. */
class EnvBytesLimit extends Error {}

/**
 * Ends env session `id` if `envs` is still hosted under it (a session closed meanwhile is its
 * env_close's to release). Returns whether it did.
 */
function dropHosted(
  hosted: Map<string, HostedEnvs>,
  session: Session,
  id: string,
  envs: HostedEnvs,
): boolean {
  if (hosted.get(id) !== envs) return false;
  hosted.delete(id);
  envs.dispose();
  session.release(envs.size);
  return true;
}

/** checkRolloutShape's group and seed checks only: episodes are the budget's (budget.ts). */
function shapeOnly(options: ServerState["options"]): RolloutLimits {
  return { maxGroupsPerRollout: options.maxGroupsPerRollout, maxEpisodesInFlight: Number.POSITIVE_INFINITY };
}

function toBytes(data: RawData): Uint8Array {
  if (Array.isArray(data)) return new Uint8Array(Buffer.concat(data));
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

/** Close reasons are limited to 123 bytes. */
function truncate(reason: string): string {
  return Buffer.byteLength(reason) <= 120
    ? reason
    : `${Buffer.from(reason).subarray(0, 117).toString("utf8")}...`;
}
