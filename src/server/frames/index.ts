// One handler per client frame type, after the hello. A handler refuses by throwing a
// RollgymError (or by rejecting the promise it returns, when it answers later); the connection
// answers it with an `error` frame about the rollout or env session the frame names (aboutOf).
import type { ClientMessage, ClientMessageType } from "../../../protocol/messages.ts";
import type { About } from "../../errors/boundary.ts";
import { RollgymError } from "../../errors/catalogue.ts";
import type { Connection } from "./context.ts";
import { onEnvClose, onEnvOpen, onEnvStep } from "./env.ts";
import { onAck, onCancel, onCredit, onRollout } from "./rollout.ts";
import { onBeginUpdate, onEndUpdate } from "./updates.ts";

export type { Connection } from "./context.ts";
export { dropHosted } from "./env.ts";

type Handlers = {
  [T in ClientMessageType]: (
    c: Connection,
    frame: Extract<ClientMessage, { type: T }>,
  ) => void | Promise<void>;
};

const HANDLERS: Handlers = {
  hello: () => {
    throw new RollgymError("hello_again", {});
  },
  rollout: onRollout,
  credit: onCredit,
  ack: onAck,
  cancel: onCancel,
  env_open: onEnvOpen,
  env_step: onEnvStep,
  env_close: onEnvClose,
  // Watch subscriptions belong to the connection, not the session: they are not resumed. A new
  // subscription is work; a `watch` on a subscribed connection changes nothing and is not.
  watch: ({ state, socket, worked }) => {
    const hub = state.rolloutContext.watch;
    if (!hub) throw new RollgymError("max_watchers", { max: 0 });
    if (hub.subscribe(socket)) worked();
  },
  unwatch: ({ state, socket }) => {
    state.rolloutContext.watch?.unsubscribe(socket);
  },
  begin_update: onBeginUpdate,
  end_update: onEndUpdate,
};

/** Runs the frame's handler; a promise when it answers later (its rejection is the refusal). */
export function handleFrame(c: Connection, frame: ClientMessage): void | Promise<void> {
  return (HANDLERS[frame.type] as (c: Connection, frame: ClientMessage) => void | Promise<void>)(c, frame);
}

/** The rollout or env session a frame is about, as its `error` frame names it. */
export function aboutOf(frame: ClientMessage): About {
  switch (frame.type) {
    case "rollout":
      return { rollout: frame.id };
    case "ack":
    case "cancel":
      return { rollout: frame.rollout };
    case "env_open":
    case "env_step":
    case "env_close":
      return { id: frame.id };
    default:
      return {};
  }
}
