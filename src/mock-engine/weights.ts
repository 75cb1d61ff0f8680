// Weights as the engine holds them, for the weight-update tests of issue #22. Two things that
// vLLM keeps apart: the version *label* it publishes (POST /update_weight_version
// {new_version}, GET /weight_info → {weight_version}; "default" at start, vLLM PR #49040),
// which changes no weights, and the weights actually *loaded*, which a simulated trainer
// changes through the test-only POST /mock/load_weights {version}. A load takes effect between
// two decode steps, as an engine applies an update between forward passes: tokens a running
// request made before it are the old weights', the rest the new ones'. The engine records which
// loaded version made every token of every request (GET /mock/generations) so tests can check
// rollgym's stamps from the engine's side; rollgym never reads it.

/** One generation request as the engine saw it. */
export interface GenerationRecord {
  /** The request id (X-Request-Id, the body's request_id, or one the engine drew). */
  id: string;
  prompt_ids: number[];
  cache_salt: string | null;
  /** The X-Session-ID header a router would route on (rollgym sends one per episode); null: none. */
  session: string | null;
  /**
   * When it began decoding, as a count of requests that began before it (records are kept in
   * the order requests ended, and an interrupted request can end after its continuation).
   */
  started: number;
  /** The ids each choice produced before the request ended (all of them, or up to an abort). */
  choices: number[][];
  /** The loaded version that made each decode step (token i of every choice). */
  versions: string[];
  /** "stop"/"length", "abort" (a pause or an injected abort), or "client_closed". */
  finish_reason: string;
}

/** A request's running record: where loads fell in its decode steps. */
export interface WeightsTracker {
  /** Requests that began decoding before this one. */
  readonly started: number;
  /** Steps made so far, read when a load happens. */
  readonly made: () => number;
  /** [first step, version] in order; a load before any step replaces the first. */
  readonly segments: { from: number; version: string }[];
}

/** Records kept at most; the oldest go first (a soak must not grow the mock without bound). */
const RECORDS_KEPT = 100_000;

export class EngineWeights {
  /** The label /weight_info reports. */
  label = "default";
  /** The weights that generate tokens. */
  loaded = "default";
  /** Loads applied so far. */
  loads = 0;
  readonly #running = new Set<WeightsTracker>();
  readonly #records: GenerationRecord[] = [];
  #dropped = 0;
  #started = 0;

  /** Starts tracking a request that is about to decode under the loaded weights. */
  start(made: () => number): WeightsTracker {
    const tracker: WeightsTracker = {
      started: this.#started++,
      made,
      segments: [{ from: 0, version: this.loaded }],
    };
    this.#running.add(tracker);
    return tracker;
  }

  /**
   * Loads `version` now, between decode steps: `advance` brings every running request's
   * progress up to this moment first.
   */
  load(version: string, advance: () => void): void {
    advance();
    this.loaded = version;
    this.loads++;
    for (const tracker of this.#running) {
      const from = tracker.made();
      const last = tracker.segments[tracker.segments.length - 1];
      if (last.from === from) last.version = version;
      else tracker.segments.push({ from, version });
    }
  }

  /** Ends a request's tracking and keeps its record with the first `steps` steps of each choice. */
  finish(
    tracker: WeightsTracker | null,
    request: Omit<GenerationRecord, "versions" | "choices" | "started">,
    choices: readonly (readonly number[])[],
  ): void {
    if (tracker) this.#running.delete(tracker);
    const steps = Math.max(0, ...choices.map((c) => c.length));
    const versions: string[] = [];
    const segments = tracker?.segments ?? [{ from: 0, version: this.loaded }];
    let at = 0;
    for (let step = 0; step < steps; step++) {
      while (at + 1 < segments.length && segments[at + 1].from <= step) at++;
      versions.push(segments[at].version);
    }
    // A request ended before it decoded (aborted while queued) made nothing; it counts as begun now.
    const started = tracker?.started ?? this.#started++;
    this.#records.push({ ...request, started, choices: choices.map((c) => [...c]), versions });
    if (this.#records.length > RECORDS_KEPT) {
      this.#records.shift();
      this.#dropped++;
    }
  }

  /** The kept records, oldest first, and how many were dropped before them. */
  records(): { dropped: number; generations: GenerationRecord[] } {
    return { dropped: this.#dropped, generations: [...this.#records] };
  }
}
