// Weight versions as rollgym knows them: from coordinating the trainer's updates, never from
// engine answers (vLLM reports none). The contract between the server, which takes the
// trainer's begin_update/end_update, and the policy, which pauses and resumes the engines.
import type { UpdateBegun, UpdateEnded, Version } from "../../protocol/messages.ts";
import type { PauseMode, UpdateEngines } from "../../protocol/settings.ts";

/** Before the trainer has said anything: the weights the engines were started with. */
export const INITIAL_VERSION: Version = { label: "initial", ordinal: 0 };

/** The ordinals in force when a turn was dispatched and when its answer was complete. */
export interface TurnVersions {
  dispatch: number;
  completion: number;
}

export type { PauseMode, UpdateEngines };

/** What begin() found once every replica is paused or out of routing: update_begun's counts. */
export type EnginesPaused = Omit<UpdateBegun, "type" | "id" | "version">;

/** What end() found: update_ended's replicas that stayed paused. */
export type EnginesResumed = Omit<UpdateEnded, "type" | "id" | "version">;

/**
 * Weight-update coordination for a policy. begin() holds every new turn (chat and token mode),
 * pauses each replica directly (not through a router) and resolves when all are paused (it
 * rejects, with admission open again and nothing paused, when every replica asked refused);
 * end() resumes them under the new version and releases the held turns. Time spent between the
 * two does not count against request timeouts or the retry budget. With `engines`
 * "held_elsewhere" (another server sharing the engines pauses them), begin() and end() do all of
 * that but ask no engine anything.
 */
export interface WeightUpdates {
  readonly current: Version;
  /** True between begin() and the end of end(). */
  readonly updating: boolean;
  begin(mode?: PauseMode, engines?: UpdateEngines): Promise<EnginesPaused>;
  end(version: Version): Promise<EnginesResumed>;
}
