// The episode budget (docs/server.md "Episode budget"): what a request would hold against its
// session's share and the server's total, and the wait of a stream rollout's next group for
// room in both. Sessions report every change of what they hold; state.episodesInFlight is the sum.
import type { Session } from "./session.ts";
import type { ServerState } from "./state.ts";

/** A stream group waiting for room: held and resolved (true) as soon as its episodes fit. */
interface Waiter {
  session: Session;
  episodes: number;
  /** Called once its episodes are held. */
  admitted: () => void;
}

/** Stream groups waiting for budget, per server, oldest first. */
const waiting = new WeakMap<ServerState, Set<Waiter>>();

/** The callback a new session reports its changes to. */
export function budgetReporter(state: ServerState): (delta: number) => void {
  return (delta) => {
    state.episodesInFlight += delta;
    if (delta < 0) admitWaiting(state);
  };
}

/** Holds the episodes of every waiting group that fits now, oldest first. */
function admitWaiting(state: ServerState): void {
  const set = waiting.get(state);
  if (!set) return;
  for (const waiter of set) {
    if (!fitsBudget(state, waiter.session, waiter.episodes)) continue;
    set.delete(waiter);
    waiter.session.hold(waiter.episodes);
    waiter.admitted();
  }
}

/** Whether `episodes` more fit the session's share and the server's total. */
function fitsBudget(state: ServerState, session: Session, episodes: number): boolean {
  const { maxEpisodesPerConnection: share, maxEpisodesInFlight: total } = state.options;
  return state.episodesInFlight + episodes <= total && session.episodesHeld + episodes <= share;
}

/**
 * Why holding `episodes` more would pass the session's share or the server's total, or null
 * when it fits. `what` names the request in the message.
 */
export function budgetRefusal(
  state: ServerState,
  session: Session,
  episodes: number,
  what: string,
): { limit: string; message: string } | null {
  const { maxEpisodesPerConnection: share, maxEpisodesInFlight: total } = state.options;
  if (state.episodesInFlight + episodes > total) {
    return {
      limit: "max_episodes_in_flight",
      message: `max_episodes_in_flight is ${total}; ${state.episodesInFlight} are held over all sessions and ${what} needs ${episodes}`,
    };
  }
  if (session.episodesHeld + episodes > share) {
    return {
      limit: "max_episodes_per_connection",
      message: `max_episodes_per_connection is ${share}; this session holds ${session.episodesHeld} episodes (running rollouts, unacknowledged groups, open env sessions) and ${what} needs ${episodes}`,
    };
  }
  return null;
}

/** Resolves once `episodes` fit the session's share and the server's total, holding them (true), or when `signal` aborts (false). */
export function holdWhenRoom(
  state: ServerState,
  session: Session,
  episodes: number,
  signal: AbortSignal,
): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(false);
  if (fitsBudget(state, session, episodes)) {
    session.hold(episodes);
    return Promise.resolve(true);
  }
  const set = waiting.get(state) ?? new Set<Waiter>();
  waiting.set(state, set);
  return new Promise<boolean>((resolve) => {
    const abort = () => {
      set.delete(waiter);
      resolve(false);
    };
    const waiter: Waiter = {
      session,
      episodes,
      admitted: () => {
        signal.removeEventListener("abort", abort);
        resolve(true);
      },
    };
    set.add(waiter);
    signal.addEventListener("abort", abort, { once: true });
  });
}
