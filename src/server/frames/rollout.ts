// The frames of a trainer's rollouts: `rollout` (admitted, then played by its Rollout), and the
// flow control around it: `credit`, `ack`, `cancel`.
import type { Ack, Cancel, Credit, RolloutRequest } from "../../../protocol/messages.ts";
import { RollgymError } from "../../errors/catalogue.ts";
import { admitRollout } from "../admission.ts";
import { holdWhenRoom } from "../budget.ts";
import { Rollout } from "../rollouts.ts";
import type { Connection } from "./context.ts";
import { onPlayedEpisodes } from "./verdict.ts";

export function onRollout(c: Connection, frame: RolloutRequest): void {
  if (frame.played_episodes) {
    onPlayedEpisodes(c, frame, frame.played_episodes);
    return;
  }
  const { state, session, worked } = c;
  const { request, tokenEngine } = admitRollout(state, session, frame);
  const rollout = new Rollout(session, frame, request, tokenEngine);
  rollout.start(state.rolloutContext, (episodes, bytes, signal, held) =>
    holdWhenRoom(state, session, episodes, bytes, signal, held),
  );
  worked();
  // A running rollout holds its connection; its end counts as work, so a trainer that has just
  // got its verdict has idle_drop_s to ask for the next one.
  void rollout.done.then(worked, worked);
}

/** Credit asks for nothing new and costs nothing: it is not work (a keep-alive of credits is idle). */
export function onCredit({ session }: Connection, frame: Credit): void {
  session.grant(frame.groups);
}

export function onAck({ session, worked }: Connection, frame: Ack): void {
  const confirmsBatch = frame.batch === true && (session.rollouts.get(frame.rollout)?.batch ?? null) !== null;
  const unknown = session.ack(frame.rollout, frame.groups, frame.batch === true);
  // Only an ack that lets go of something held is work; one of nothing would be a free keep-alive.
  if (confirmsBatch || unknown.length < frame.groups.length) worked();
  if (unknown.length > 0)
    throw new RollgymError("unknown_group", { rollout: frame.rollout, groups: unknown });
}

export function onCancel({ session, worked }: Connection, frame: Cancel): void {
  const rollout = session.rollouts.get(frame.rollout);
  if (!rollout) throw new RollgymError("unknown_rollout", { rollout: frame.rollout });
  // Cancelling a finished rollout changes nothing: not work.
  if (rollout.batch === null) worked();
  rollout.cancel();
}
