// What the other clients hear of an open weight update that holds their rollouts (PROTOCOL.md
// "Weight updates"). Once the trainer's connection is gone mid-update, every running rollout
// of another session is told, in a `held` frame (a notice, not an error: the rollout goes on),
// which update holds it, for how long and where its trainer is. A rollout that starts while such
// an update is open is told at once.
import type { WebSocket } from "ws";
import { endedByHeartbeat } from "./connections.ts";
import type { Session } from "./session.ts";
import type { UpdateCoordinator } from "./update-coordinator.ts";

/** `session`'s socket `ws` closed with `code`: logged and told when it was the trainer's mid-update. */
export function connectionClosed(
  updates: UpdateCoordinator,
  sessions: Iterable<Session>,
  session: Session,
  ws: WebSocket,
  code: number,
): void {
  const why = endedByHeartbeat(ws) ? "it stopped answering the heartbeat's pings" : `close code ${code}`;
  const described = updates.connectionLost(session, why);
  const id = updates.status()?.id;
  if (described === null || id === undefined) return;
  for (const other of sessions) {
    if (other === session) continue;
    for (const rollout of other.rollouts.values())
      if (rollout.batch === null) tell(other, rollout.id, id, described);
  }
}

/** A rollout of `session` starts: told at once when an update whose trainer is gone holds it. */
export function rolloutStarted(updates: UpdateCoordinator, session: Session, rollout: string): void {
  const status = updates.status();
  if (status === null || status.trainer === "connected") return;
  const described = updates.describe();
  if (described !== null) tell(session, rollout, status.id, described);
}

function tell(session: Session, rollout: string, update: string, described: string): void {
  session.sendNow({
    type: "held",
    rollout,
    update,
    message: `rollout ${JSON.stringify(rollout)} is held: ${described}; its groups wait (they are not lost) until the update ends`,
  });
}
