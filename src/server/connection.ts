// One WebSocket connection: the handshake, then every client frame decoded, validated and
// handed to its handler (frames/). A bad frame gets an `error` reply and the connection carries
// on; an undecodable one closes only this connection. Nothing a client sends can take the
// server down.
import type { RawData, WebSocket } from "ws";
import { CLOSE_CODES, decodeFrame } from "../../protocol/codec.ts";
import { type ClientMessage, hasFrameEnvelope, validateClientMessage } from "../../protocol/messages.ts";
import { PROTOCOL_VERSION } from "../../protocol/version.ts";
import { type About, isRefusal, messageOf, wsAnswer } from "../errors/boundary.ts";
import { RollgymError } from "../errors/catalogue.ts";
import { sameSecret } from "./auth.ts";
import { openSession } from "./budget.ts";
import type { ConnectionTicket } from "./connections.ts";
import type { HostedEnvs } from "./env-host.ts";
import { aboutOf, type Connection, dropHosted, handleFrame } from "./frames/index.ts";
import { Outbound } from "./outbound.ts";
import type { Session } from "./session.ts";
import type { ServerState } from "./state.ts";
import { connectionClosed } from "./update-notices.ts";

/** `ticket` hears of the hello and of the connection's work, and asks whether it holds work. */
export function handleConnection(state: ServerState, socket: WebSocket, ticket?: ConnectionTicket): void {
  let connection: Connection | null = null;
  const hosted = new Map<string, HostedEnvs>();
  // An open env session is not held work: it keeps its connection through its steps (each is
  // work), so an env_open every env_idle_s cannot keep an otherwise silent socket for ever.
  if (ticket)
    ticket.holding = () =>
      state.rolloutContext.watch?.watching(socket) === true ||
      [...(connection?.session.rollouts.values() ?? [])].some((r) => r.batch === null);
  const worked = () => ticket?.worked();
  // Every reply goes through `out`, which watches the socket's buffered bytes (outbound.ts).
  const out = new Outbound(socket, state.options);
  const reply = (frame: object) => {
    out.send(frame);
  };
  // An error frame, a close, or both (errors/catalogue.ts says which).
  const refuse = (error: unknown, about: About = {}) => {
    const { frame, close } = wsAnswer(error, about);
    if (frame) reply(frame);
    if (close) socket.close(close.code, close.reason);
  };

  // A frame that arrives while the client's replies pile up waits, in order, until they drain.
  socket.on("message", (data: RawData, isBinary: boolean) => {
    out.whenFlowing(() => {
      // A fault outside the handlers' own (a reply that fails to encode, a refusal that throws)
      // ends this connection, never the process: its session waits for a resume as after any drop.
      try {
        onFrame(data, isBinary);
      } catch (error) {
        state.log.error({ err: error }, "frame failed outside its handler");
        socket.close(CLOSE_CODES.internalError, "internal error");
      }
    });
  });

  const onFrame = (data: RawData, isBinary: boolean): void => {
    if (!isBinary) {
      refuse(new RollgymError("text_frame", {}));
      return;
    }
    let value: unknown;
    try {
      value = decodeFrame(toBytes(data), "client");
    } catch (error) {
      refuse(new RollgymError("undecodable_frame", { message: messageOf(error) }));
      return;
    }
    if (!hasFrameEnvelope(value)) {
      refuse(new RollgymError("no_envelope", {}));
      return;
    }
    const checked = validateClientMessage(value);
    if (!checked.ok) {
      if (!connection) {
        refuse(new RollgymError("invalid_hello", { message: checked.message }));
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
      refuse(new RollgymError(checked.code, { message: checked.message }, checked.field), owner);
      return;
    }
    const frame = checked.message;
    // A handler's throw, now or later, is answered on this connection and goes no further.
    const failed = (error: unknown): void => {
      if (isRefusal(error)) {
        refuse(error, connection ? aboutOf(frame) : {});
        return;
      }
      state.log.error({ err: error }, "frame handler failed");
      refuse(error);
    };
    try {
      if (!connection) {
        const session = handshake(state, frame, reply, out);
        connection = { state, session, socket, out, hosted, reply, refuse, worked };
        ticket?.hello();
        return;
      }
      handleFrame(connection, frame)?.catch((error: unknown) => {
        try {
          failed(error);
        } catch (answering) {
          state.log.error({ err: answering }, "answering a failed frame failed");
        }
      });
    } catch (error) {
      failed(error);
    }
  };

  socket.on("close", (code: number) => {
    state.rolloutContext.watch?.unsubscribe(socket);
    const current = (connection as Connection | null)?.session ?? null;
    if (current) for (const [id, envs] of hosted) dropHosted(hosted, current, id, envs);
    if (current && state.sessions.get(current.id) === current && !state.closing) {
      if (current.outbound === out)
        connectionClosed(state.updates, state.sessions.values(), current, socket, code);
      // A client that said goodbye (1000) with nothing held has nothing to resume.
      if (code === 1000 && current.idle) current.end();
      else current.detach(out, state.options.resumeGraceMs);
    }
  });
  socket.on("error", (error) => state.log.warn({ err: error }, "socket error"));
}

/** Answers a hello with a welcome to a new or resumed session, or throws its refusal (a close). */
function handshake(
  state: ServerState,
  frame: ClientMessage,
  reply: (frame: object) => void,
  out: Outbound,
): Session {
  if (frame.type !== "hello") throw new RollgymError("no_hello", { type: frame.type });
  if (frame.protocol !== PROTOCOL_VERSION)
    throw new RollgymError("protocol_version", { client: frame.protocol, server: PROTOCOL_VERSION });
  // A resume that claims the role needs the token too: a session id is not a trainer token.
  const { trainerToken } = state.options;
  if (frame.role === "trainer" && trainerToken !== null && !sameSecret(frame.trainer_token, trainerToken))
    throw new RollgymError("trainer_token", { given: frame.trainer_token !== undefined });
  let session: Session;
  let resumed = false;
  if (frame.resume !== undefined) {
    const found = state.sessions.get(frame.resume);
    if (!found)
      throw new RollgymError("unknown_session", {
        session: frame.resume,
        graceS: state.options.resumeGraceMs / 1000,
      });
    session = found;
    resumed = true;
  } else {
    // A second trainer is refused before a session is made for it.
    if (frame.role === "trainer") state.updates.mayClaim(null);
    session = openSession(state);
    state.sessions.set(session.id, session);
    session.onEnd = () => {
      state.sessions.delete(session.id);
      void state.updates
        .sessionEnded(session)
        .catch((error: unknown) =>
          state.log.error({ err: error }, "resuming the engines after the trainer left failed"),
        );
    };
  }
  // Only a trainer's welcome says anything of versions: other clients see the same bytes as ever.
  const trainer = frame.role === "trainer" ? state.updates.claimTrainer(session) : null;
  reply({
    type: "welcome",
    protocol: PROTOCOL_VERSION,
    server: `rollgym/${state.version}`,
    session: session.id,
    resumed,
    envs: state.registry.tagNames(),
    limits: state.limits(trainer !== null),
    ...trainer,
  });
  session.attach(out, resumed);
  return session;
}

function toBytes(data: RawData): Uint8Array {
  if (Array.isArray(data)) return new Uint8Array(Buffer.concat(data));
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}
