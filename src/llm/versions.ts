// Weight versions as rollgym knows them: from coordinating the trainer's updates, never from
// engine answers (vLLM reports none). The contract between the server, which takes the
// trainer's begin_update/end_update, and the policy, which pauses and resumes the engines.
import type { PauseMode } from "../../protocol/settings.ts";

/** A weight version as the trainer names it: an opaque label and its ordinal. */
export interface PolicyVersion {
  /** What the trainer calls it, e.g. "step-42". */
  label: string;
  /** Increases with every update; the staleness rule and ages count in these. */
  ordinal: number;
}

/** Before the trainer has said anything: the weights the engines were started with. */
export const INITIAL_VERSION: PolicyVersion = { label: "initial", ordinal: 0 };

/** The ordinals in force when a turn was dispatched and when its answer was complete. */
export interface TurnVersions {
  dispatch: number;
  completion: number;
}

export type { PauseMode };

/** What begin() found once every replica is paused or out of routing. */
export interface UpdateBegun {
  /** Replicas paused through the engine's own /pause. */
  paused: number;
  /** Replicas without /pause whose in-flight requests were aborted to be continued after the update. */
  aborted: number;
  /** Replicas that failed to pause: taken out of routing until they answer again. */
  out_of_routing: string[];
  /** Engine requests in flight at the moment admission closed. */
  in_flight: number;
}

/**
 * Weight-update coordination for a policy. begin() holds every new turn (chat and token mode),
 * pauses each replica directly (not through a router) and resolves when all are paused; end()
 * resumes them under the new version and releases the held turns. Time spent between the two
 * does not count against request timeouts or the retry budget.
 */
export interface WeightUpdates {
  readonly current: PolicyVersion;
  /** True between begin() and the end of end(). */
  readonly updating: boolean;
  begin(mode?: PauseMode): Promise<UpdateBegun>;
  end(version: PolicyVersion): Promise<void>;
}
