// The turn loop every episode runs, in chat mode (batch.ts) and token mode (token-episode.ts):
// a turn that throws fails its episode with the reason, a cancelled batch stops at the next turn.
import { messageOf } from "../errors/boundary.ts";
import type { Episode } from "./episode.ts";

/** What the turn loop tells and is told by its batch. */
export interface TurnHooks {
  /** A turn of `episode` was played: `recorded` (its latest turn record is new), or failed. */
  onTurn?: (episode: Episode, recorded: boolean) => void;
  signal?: AbortSignal;
}

/** Plays one model turn; throws when it cannot (the episode then fails with the reason). */
export type TurnPlayer = (turn: number) => Promise<void>;

/** Drives an episode turn by turn until it ends, fails or is cancelled. */
export async function playTurns(episode: Episode, hooks: TurnHooks, play: TurnPlayer): Promise<void> {
  while (episode.active) {
    if (hooks.signal?.aborted) {
      episode.fail("cancelled");
      return;
    }
    const turn = episode.turnIndex;
    try {
      await play(turn);
    } catch (error) {
      episode.fail(hooks.signal?.aborted ? "cancelled" : `turn ${turn + 1}: ${messageOf(error)}`);
    }
    hooks.onTurn?.(episode, episode.turnIndex > turn);
  }
}
