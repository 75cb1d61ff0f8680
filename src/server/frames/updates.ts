// The trainer's weight-update frames: `begin_update` and `end_update` (updates.ts decides). The
// answers go out at once, outside the outbox, so they never wait behind groups awaiting credit;
// the connection keeps reading meanwhile (acks and credit flow while the engines pause).
import type { BeginUpdate, EndUpdate } from "../../../protocol/messages.ts";
import type { Connection } from "./context.ts";

export function onBeginUpdate(c: Connection, frame: BeginUpdate): void {
  const { state, session } = c;
  // Work once accepted: a refused begin_update (not the trainer, …) would be a free keep-alive.
  state.updates.begin(session, frame.id, frame.mode).then(
    (begun) => {
      c.worked();
      session.sendNow(begun);
    },
    (error: unknown) => c.refuse(error),
  );
}

export function onEndUpdate(c: Connection, frame: EndUpdate): void {
  const { state, session } = c;
  state.updates.end(session, frame.id, frame.version).then(
    (ended) => {
      c.worked();
      session.sendNow(ended);
    },
    (error: unknown) => c.refuse(error),
  );
}
