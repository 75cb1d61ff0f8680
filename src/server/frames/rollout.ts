// The frames of a trainer's rollouts: `rollout` (admitted, then played by its Rollout), and the
// flow control around it: `credit`, `ack`, `cancel`.
import type { Ack, Cancel, Credit, RolloutRequest } from "../../../protocol/messages.ts";
import { RollgymError } from "../../errors/catalogue.ts";
import { admitRollout } from "../admission.ts";
import { holdWhenRoom } from "../budget.ts";
import { Rollout } from "../rollouts.ts";
import type { Connection } from "./context.ts";

export function onRollout({ state, session }: Connection, frame: RolloutRequest): void {
  const { request, tokenEngine, pace } = admitRollout(state, session, frame);
  new Rollout(session, frame, request, tokenEngine, pace).start(
    state.rolloutContext,
    (episodes, bytes, signal, held) => holdWhenRoom(state, session, episodes, bytes, signal, held),
  );
}

export function onCredit({ session }: Connection, frame: Credit): void {
  session.grant(frame.groups);
}

export function onAck({ session }: Connection, frame: Ack): void {
  const unknown = session.ack(frame.rollout, frame.groups, frame.batch === true);
  if (unknown.length > 0)
    throw new RollgymError("unknown_group", { rollout: frame.rollout, groups: unknown });
}

export function onCancel({ session }: Connection, frame: Cancel): void {
  const rollout = session.rollouts.get(frame.rollout);
  if (!rollout) throw new RollgymError("unknown_rollout", { rollout: frame.rollout });
  rollout.cancel();
}
