// The episode budget (docs/server.md "Episode budget"): what a request would hold against its
// session's share and the server's total, and the wait of a stream rollout's next group for
// room in both. Sessions report every change of what they hold; state.episodesInFlight is the sum.
import type { Session } from "./session.ts";
import type { ServerState } from "./state.ts";

/** Stream groups waiting for budget, per server: woken whenever any session releases episodes. */
const waiting = new WeakMap<ServerState, Set<() => void>>();

/** The callback a new session reports its changes to. */
export function budgetReporter(state: ServerState): (delta: number) => void {
  return (delta) => {
    state.episodesInFlight += delta;
    if (delta < 0) for (const wake of [...(waiting.get(state) ?? [])]) wake();
  };
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

/** Resolves once `episodes` fit the session's share and the server's total (or `signal` aborts), and holds them. */
export async function holdWhenRoom(
  state: ServerState,
  session: Session,
  episodes: number,
  signal: AbortSignal,
): Promise<boolean> {
  while (budgetRefusal(state, session, episodes, "") && !signal.aborted) {
    await new Promise<void>((resolve) => {
      const set = waiting.get(state) ?? new Set<() => void>();
      waiting.set(state, set);
      const wake = () => {
        set.delete(wake);
        signal.removeEventListener("abort", wake);
        resolve();
      };
      set.add(wake);
      signal.addEventListener("abort", wake, { once: true });
    });
  }
  if (signal.aborted) return false;
  session.hold(episodes);
  return true;
}
