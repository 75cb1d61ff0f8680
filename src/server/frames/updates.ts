// The trainer's weight-update frames: `begin_update` and `end_update` (updates.ts decides). The
// answers go out at once, outside the outbox, so they never wait behind groups awaiting credit;
// the connection keeps reading meanwhile (acks and credit flow while the engines pause), and
// answers a refusal when the returned promise rejects (connection.ts).
import type { BeginUpdate, EndUpdate } from "../../../protocol/messages.ts";
import type { Connection } from "./context.ts";

export async function onBeginUpdate(c: Connection, frame: BeginUpdate): Promise<void> {
  const begun = await c.state.updates.begin(c.session, frame.id, frame.mode, frame.version, frame.engines);
  // Work once accepted: a refused begin_update (not the trainer, …) would be a free keep-alive.
  c.worked();
  c.session.sendNow(begun);
}

export async function onEndUpdate(c: Connection, frame: EndUpdate): Promise<void> {
  const ended = await c.state.updates.end(c.session, frame.id, frame.version);
  c.worked();
  c.session.sendNow(ended);
}
