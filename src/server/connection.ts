// One WebSocket connection: the handshake, then every client frame validated and dispatched.
// A bad frame gets an `error` reply and the connection carries on; an undecodable one closes
// only this connection. Nothing a client sends can take the server down.
import type { RawData, WebSocket } from "ws";
import { CLOSE_CODES, decodeFrame, encodeMessage } from "../../protocol/codec.ts";
import { type ClientMessage, hasFrameEnvelope, validateClientMessage } from "../../protocol/messages.ts";
import { PROTOCOL_VERSION } from "../../protocol/version.ts";
import { groupLocalScores, validateBatchRequest } from "../rollout/batch.ts";
import { EnvHostError, HostedEnvs } from "./env-host.ts";
import { envOpenRequest, rolloutBatchRequest } from "./requests.ts";
import { runRollout } from "./rollouts.ts";
import { Session } from "./session.ts";
import type { ServerState } from "./state.ts";

type ErrorCode = string;

export function handleConnection(state: ServerState, socket: WebSocket): void {
  let session: Session | null = null;
  const hosted = new Map<string, HostedEnvs>();

  const reply = (frame: Record<string, unknown>) => {
    if (socket.readyState === socket.OPEN) socket.send(encodeMessage(frame));
  };
  const fail = (code: ErrorCode, message: string, extra: Record<string, unknown> = {}) =>
    reply({ type: "error", code, message, ...extra });

  socket.on("message", (data: RawData, isBinary: boolean) => {
    if (!isBinary) {
      socket.close(CLOSE_CODES.undecodable, "text frames are not part of the protocol; send binary msgpack");
      return;
    }
    let value: unknown;
    try {
      value = decodeFrame(toBytes(data));
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
        session = handshake(state, socket, message, reply);
        return;
      }
      dispatch(state, session, hosted, message, fail, reply);
    } catch (error) {
      state.log.error({ err: error }, "frame handler failed");
      fail("internal", error instanceof Error ? error.message : String(error));
    }
  });

  socket.on("close", () => {
    const current = session as Session | null;
    if (current && state.sessions.get(current.id) === current && !state.closing)
      current.detach(socket, state.options.resumeGraceMs);
  });
  socket.on("error", (error) => state.log.warn({ err: error }, "socket error"));
}

function handshake(
  state: ServerState,
  socket: WebSocket,
  message: ClientMessage,
  reply: (frame: Record<string, unknown>) => void,
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
    session = new Session();
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
  session.attach(socket, resumed);
  return session;
}

function dispatch(
  state: ServerState,
  session: Session,
  hosted: Map<string, HostedEnvs>,
  message: ClientMessage,
  fail: (code: ErrorCode, message: string, extra?: Record<string, unknown>) => void,
  reply: (frame: Record<string, unknown>) => void,
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
      if (session.rollouts.has(message.id)) {
        fail("duplicate_id", `rollout id ${JSON.stringify(message.id)} is already in use in this session`, {
          rollout: message.id,
        });
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
      if (groups > options.maxGroupsPerRollout) {
        fail(
          "limit",
          `max_groups_per_rollout is ${options.maxGroupsPerRollout}; this rollout asks for ${groups}`,
          {
            rollout: message.id,
            field: "tags",
          },
        );
        return;
      }
      const unknownTag = message.tags.find((t) => !state.registry.hasTag(t.tag));
      if (unknownTag) {
        fail(
          "unknown_tag",
          `unknown tag ${JSON.stringify(unknownTag.tag)}; known: ${state.registry.tagNames().join(", ")}`,
          {
            rollout: message.id,
            field: "tags",
          },
        );
        return;
      }
      const episodes = groups * message.group_size;
      if (state.episodesInFlight + episodes > options.maxEpisodesInFlight) {
        fail(
          "limit",
          `max_episodes_in_flight is ${options.maxEpisodesInFlight}; ${state.episodesInFlight} are running and this rollout adds ${episodes}`,
          { rollout: message.id },
        );
        return;
      }
      let request: ReturnType<typeof rolloutBatchRequest>;
      try {
        request = rolloutBatchRequest(state.config, message);
        validateBatchRequest(request);
        if (message.delivery === "stream" && !groupLocalScores(request)) {
          throw new RangeError(
            "stream delivery needs scores that are final when a group finishes: use reward_normalization grouping state or method identity",
          );
        }
        if (request.tokens && !state.rolloutContext.policy.tokenEngine?.()) {
          throw new RangeError(
            `tokens: true needs the server to run against a remote engine (--llm); it serves the built-in ${state.rolloutContext.policy.name} policy`,
          );
        }
      } catch (error) {
        fail("bad_frame", error instanceof Error ? error.message : String(error), { rollout: message.id });
        return;
      }
      state.episodesInFlight += episodes;
      void runRollout(state.rolloutContext, session, message, request).finally(() => {
        state.episodesInFlight -= episodes;
      });
      return;
    }
    case "env_open": {
      if (hosted.has(message.id)) {
        fail("duplicate_id", `env session ${JSON.stringify(message.id)} is already open`, { id: message.id });
        return;
      }
      if (!state.registry.hasTag(message.tag)) {
        fail(
          "unknown_tag",
          `unknown tag ${JSON.stringify(message.tag)}; known: ${state.registry.tagNames().join(", ")}`,
          {
            field: "tag",
          },
        );
        return;
      }
      if (message.groups > options.maxGroupsPerRollout) {
        fail(
          "limit",
          `max_groups_per_rollout is ${options.maxGroupsPerRollout}; env_open asks for ${message.groups}`,
        );
        return;
      }
      const envs = new HostedEnvs(state.registry, envOpenRequest(state.config, message));
      hosted.set(message.id, envs);
      reply({ type: "env_opened", id: message.id, episodes: envs.opened() });
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
      try {
        reply({ type: "env_stepped", id: message.id, results: envs.step(message.responses) });
      } catch (error) {
        if (error instanceof EnvHostError)
          fail(error.code, error.message, { field: "responses", id: message.id });
        else throw error;
      }
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
      reply({ type: "env_closed", id: message.id, ...envs.close() });
      return;
    }
  }
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
