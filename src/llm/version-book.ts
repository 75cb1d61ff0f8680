// The policy's side of a weight update (issue #22) before any engine is involved: the version
// in force, the admission gate that holds every new turn while an update is open, and the pause
// clock that keeps the time held off request timeouts and retry budgets. Remote policies add
// the engines (engine-updates.ts); the built-in policies use it as it is.
import type { Version } from "../../protocol/messages.ts";
import { MAX_VERSION_ORDINAL, PAUSE_MODES, UPDATE_ENGINES } from "../../protocol/settings.ts";
import { RollgymError } from "../errors/catalogue.ts";
import { onParentAbort, type PauseClock } from "./deadline.ts";
import {
  type EnginesPaused,
  type EnginesResumed,
  INITIAL_VERSION,
  type PauseMode,
  type TurnVersions,
  type UpdateEngines,
  type WeightUpdates,
} from "./versions.ts";

/** begin() while an update is open, or end() without one. */
export class UpdateStateError extends RollgymError<"update_state"> {
  constructor(message: string) {
    super("update_state", { message });
    this.name = "UpdateStateError";
  }
}

/** Why a version given to end() is refused, naming the field, the value and what is allowed; null when fine. */
export function versionProblem(version: Version, current: Version): string | null {
  if (typeof version?.label !== "string" || version.label === "")
    return `version.label ${JSON.stringify(version?.label)} is not a non-empty string`;
  if (
    !Number.isSafeInteger(version.ordinal) ||
    version.ordinal < current.ordinal ||
    version.ordinal > MAX_VERSION_ORDINAL
  )
    return `version.ordinal ${JSON.stringify(version.ordinal)} is not an integer from the current ordinal ${current.ordinal} to ${MAX_VERSION_ORDINAL}`;
  if (version.ordinal === current.ordinal && version.label !== current.label)
    return `version.ordinal ${version.ordinal} is the current one, so its label must stay ${JSON.stringify(current.label)} (got ${JSON.stringify(version.label)}); a new version takes a higher ordinal`;
  return null;
}

/**
 * Versions, the admission gate and the pause clock. Engines are paused and resumed by the
 * hooks pauseEngines() and resumeEngines(), which do nothing here.
 */
export class VersionBook implements WeightUpdates, PauseClock {
  #current: Version = INITIAL_VERSION;
  #updating = false;
  #epoch = 0;
  #pausedTotal = 0;
  #pausedSince: number | null = null;
  #open: (() => void) | null = null;
  #gate: Promise<void> | null = null;
  readonly #resumeWaiters = new Set<() => void>();
  /** Replicas the latest update paused in a mode that holds every request arriving after the pause (see stamp()). */
  #holding: ReadonlySet<string> = new Set();
  /** The open update leaves the engines to another server: no engine request in begin() or end(). */
  #heldElsewhere = false;
  /** Turns dispatched and not yet answered, kept by the policy (for update_begun's in_flight). */
  inFlight = 0;

  get current(): Version {
    return this.#current;
  }

  get updating(): boolean {
    return this.#updating;
  }

  /** Updates begun so far: a request dispatched in another epoch than the one it ends in was overtaken by one. */
  get epoch(): number {
    return this.#epoch;
  }

  /** True once the trainer has named a version: records carry versions from then on. */
  get named(): boolean {
    return this.#current !== INITIAL_VERSION;
  }

  get paused(): boolean {
    return this.#pausedSince !== null;
  }

  pausedMs(): number {
    return this.#pausedTotal + (this.#pausedSince === null ? 0 : Date.now() - this.#pausedSince);
  }

  onResume(fn: () => void): () => void {
    if (!this.paused) {
      queueMicrotask(fn);
      return () => {};
    }
    this.#resumeWaiters.add(fn);
    return () => {
      this.#resumeWaiters.delete(fn);
    };
  }

  /**
   * Null while admission is open; otherwise a promise that resolves when the update ends, or
   * rejects with the signal's reason when it aborts first.
   */
  admit(signal?: AbortSignal): Promise<void> | null {
    const gate = this.#gate;
    if (gate === null) return null;
    if (!signal) return gate;
    signal.throwIfAborted();
    let leave = (): void => {};
    const aborted = new Promise<never>((_, reject) => {
      leave = onParentAbort(signal, () => reject(signal.reason));
    });
    return Promise.race([gate, aborted]).finally(leave);
  }

  /**
   * The versions of a turn dispatched under `dispatch`, completing now. `answered` says where
   * and in which epoch its request was sent, for a request answered whole (not interrupted).
   * Sent just before the latest update began and answered after it changed the version, such a
   * request either ran before the pause (its answer would have arrived before the update ended)
   * or reached the engine after it: where that update paused the replica in "abort" or "wait"
   * mode, the engine ended or finished every request it held by then and kept the rest unsampled
   * until /resume, so every token is the new version's. Elsewhere (a keep pause froze it
   * half-way, or more than one update passed) it spans, and `dispatch` stays, a lower bound.
   */
  stamp(dispatch: number, answered?: { epoch: number; url: string }): TurnVersions {
    const completion = this.#current.ordinal;
    const held =
      answered !== undefined &&
      completion !== dispatch &&
      answered.epoch === this.#epoch - 1 &&
      this.#holding.has(answered.url);
    return { dispatch: held ? completion : dispatch, completion };
  }

  async begin(mode: PauseMode = "keep", engines: UpdateEngines = "pause"): Promise<EnginesPaused> {
    if (!PAUSE_MODES.includes(mode))
      throw new RangeError(`pause mode ${JSON.stringify(mode)} is not one of ${PAUSE_MODES.join(", ")}`);
    if (!UPDATE_ENGINES.includes(engines))
      throw new RangeError(`engines ${JSON.stringify(engines)} is not one of ${UPDATE_ENGINES.join(", ")}`);
    if (this.#updating)
      throw new UpdateStateError(
        `an update is already open (begun under version ${this.#current.label}); end it before beginning another`,
      );
    this.#updating = true;
    this.#epoch++;
    this.#pausedSince = Date.now();
    this.#gate = new Promise<void>((resolve) => {
      this.#open = resolve;
    });
    this.#holding = new Set();
    this.#heldElsewhere = engines === "held_elsewhere";
    // Held elsewhere: the turns wait at the gate, and what the engines do is the other server's
    // business (its pause mode), so stamps here stay lower bounds (stamp()).
    if (this.#heldElsewhere)
      return { paused: 0, aborted: 0, out_of_routing: [], in_flight: this.inFlight, refused: [] };
    let begun: EnginesPaused;
    try {
      begun = await this.pauseEngines(mode, this.inFlight);
    } catch (error) {
      // Nothing was left paused: the held turns go on under the version in force.
      this.#reopen();
      throw error;
    }
    if (mode !== "keep") this.#holding = new Set(this.pausedReplicas());
    return begun;
  }

  async end(version: Version): Promise<EnginesResumed> {
    if (!this.#updating) throw new UpdateStateError("no update is open: begin() one first");
    const problem = versionProblem(version, this.#current);
    if (problem) throw new RangeError(problem);
    // Answers that complete after the engines resume are the new weights' (keep mode spans).
    this.#current = { label: version.label, ordinal: version.ordinal };
    const resumed = this.#heldElsewhere ? { failed_to_resume: [] } : await this.resumeEngines(this.#current);
    this.#reopen();
    return resumed;
  }

  /** Ends the update: the pause clock stops, held turns and resume waiters go on. */
  #reopen(): void {
    this.#pausedTotal += Date.now() - (this.#pausedSince ?? Date.now());
    this.#pausedSince = null;
    this.#updating = false;
    this.#heldElsewhere = false;
    const open = this.#open;
    this.#open = null;
    this.#gate = null;
    open?.();
    const waiters = [...this.#resumeWaiters];
    this.#resumeWaiters.clear();
    for (const waiter of waiters) waiter();
  }

  /** Pauses the engines once admission is closed; here there are none. */
  protected async pauseEngines(_mode: PauseMode, inFlight: number): Promise<EnginesPaused> {
    return { paused: 0, aborted: 0, out_of_routing: [], in_flight: inFlight, refused: [] };
  }

  /** The replicas pauseEngines() paused with the engine's own pause; here there are none. */
  protected pausedReplicas(): readonly string[] {
    return [];
  }

  /** Publishes `version` on the engines and resumes them; here there are none. */
  protected async resumeEngines(_version: Version): Promise<EnginesResumed> {
    return { failed_to_resume: [] };
  }
}
