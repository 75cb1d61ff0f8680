// Weight updates against real engines (issue #22): every replica is paused directly at its own
// base URL (never through a router) with vLLM's POST /pause?mode=…&clear_cache=…, confirmed with
// GET /is_paused, and resumed with POST /resume after the version label is published (POST
// /update_weight_version, where the engine has it), retried a few times until GET /is_paused
// says false. An engine without /pause (llama.cpp, vLLM without VLLM_SERVER_DEV_MODE or before
// 0.12: the route answers 404/405) gets the portable fallback: its in-flight requests are
// interrupted, to be continued (token mode) or asked again (chat mode) once the update is over.
// A replica that refuses to pause or fails to resume is taken out of routing with the reason
// (update_begun.refused, update_ended.failed_to_resume) and its requests are interrupted the same
// way, so none is left half-updated; its probe keeps it out while it is paused (checkNotPaused).
import { setTimeout as sleep } from "node:timers/promises";
import type { Version } from "../../protocol/messages.ts";
import { messageOf } from "../errors/boundary.ts";
import { RollgymError } from "../errors/catalogue.ts";
import { onParentAbort } from "./deadline.ts";
import { serverRoot } from "./engine.ts";
import { EngineError } from "./http.ts";
import { VersionBook } from "./version-book.ts";
import type { EnginesPaused, EnginesResumed, PauseMode } from "./versions.ts";

/** Waits between attempts at POST /resume: four tries over about four seconds, then the replica is out. */
export const RESUME_RETRY_DELAYS_MS: readonly number[] = [250, 1000, 2500];

/** What the updates need of the policy whose replicas they pause. */
export interface UpdateHost {
  readonly urls: readonly string[];
  /** One control request to a replica's server root, with the policy's headers and connections. */
  control(method: "GET" | "POST", url: string, body?: unknown): Promise<unknown>;
  isHealthy(url: string): boolean;
  /** Takes the replica out of routing, for `reason`, until a probe finds it answering (and not paused). */
  takeOut(url: string, reason: string): void;
}

export interface EngineUpdateOptions {
  /**
   * vLLM's clear_cache, sent with every POST /pause (rollgym.llm.pause_clear_cache): true drops
   * the KV and prefix caches, so a keep pause's frozen requests are prefilled again under the new
   * weights after /resume; false (default) keeps them, and frozen requests go on from KV the old
   * weights computed.
   */
  clearCache?: boolean;
  /** Waits between POST /resume attempts (RESUME_RETRY_DELAYS_MS). */
  resumeDelaysMs?: readonly number[];
}

/** The reason an in-flight request was ended by a weight update: continued or asked again after it, never a failure. */
export class UpdateInterrupted extends EngineError {
  constructor(url: string) {
    super(`interrupted at ${url} by a weight update (continued after it)`, 503, null, false);
    this.name = "UpdateInterrupted";
  }
}

/** One generation request in flight on a replica, as an update sees it. */
export interface Dispatch {
  readonly url: string;
  /** Aborts with UpdateInterrupted when an update interrupts it, or with the caller's reason. */
  readonly signal: AbortSignal;
  /** The version ordinal in force when it was sent. */
  readonly version: number;
  /** The update epoch it was sent in. */
  readonly epoch: number;
  /** Ends its tracking; idempotent. */
  done(): void;
}

/**
 * The requests in flight on one replica under one parent signal (a rollout's): one controller
 * for all of them, aborted by an interruption or by the parent, so a request makes no
 * controller or listener of its own. An interruption retires the lane; later requests open a new one.
 */
class Lane {
  readonly controller = new AbortController();
  readonly #lanes: Map<AbortSignal | null, Lane>;
  readonly #key: AbortSignal | null;
  requests = 0;
  /** Unsubscribes from the parent's abort; null without a parent. */
  leave: (() => void) | null = null;
  #drained: Promise<void> | null = null;
  #resolveDrained: (() => void) | null = null;

  /** Opens the lane of `key` in `lanes` (a replica's). */
  constructor(lanes: Map<AbortSignal | null, Lane>, key: AbortSignal | null) {
    this.#lanes = lanes;
    this.#key = key;
    lanes.set(key, this);
  }

  /** Resolves once every request in it has let go (made only when an interruption waits). */
  drained(): Promise<void> {
    if (this.requests === 0) return Promise.resolve();
    this.#drained ??= new Promise<void>((resolve) => {
      this.#resolveDrained = resolve;
    });
    return this.#drained;
  }

  /** One request let go; the last closes the lane. */
  leaveOne(): void {
    if (--this.requests > 0) return;
    this.leave?.();
    if (this.#lanes.get(this.#key) === this) this.#lanes.delete(this.#key);
    this.#resolveDrained?.();
  }
}

/** A request's tracking: a method, not a closure per request. */
class Ticket implements Dispatch {
  readonly url: string;
  readonly signal: AbortSignal;
  readonly version: number;
  readonly epoch: number;
  #lane: Lane | null;
  readonly #updates: EngineUpdates;

  constructor(updates: EngineUpdates, url: string, lane: Lane) {
    this.url = url;
    this.signal = lane.controller.signal;
    this.version = updates.current.ordinal;
    this.epoch = updates.epoch;
    this.#lane = lane;
    this.#updates = updates;
  }

  done(): void {
    const lane = this.#lane;
    if (lane === null) return;
    this.#lane = null;
    this.#updates.inFlight--;
    lane.leaveOne();
  }
}

/** Replicas listed in update frames, in URL order. */
function byUrl(a: { url: string }, b: { url: string }): number {
  return a.url < b.url ? -1 : a.url > b.url ? 1 : 0;
}

function missingRoute(error: unknown): boolean {
  return error instanceof EngineError && (error.status === 404 || error.status === 405);
}

export class EngineUpdates extends VersionBook {
  readonly #host: UpdateHost;
  readonly #clearCache: boolean;
  readonly #resumeDelaysMs: readonly number[];
  /** Replicas sent a /pause and not yet seen resumed: the ones the probe may resume itself. */
  readonly #mayBePaused = new Set<string>();
  /** Per replica, the open lane of each parent signal (null: requests without one). */
  readonly #lanes = new Map<string, Map<AbortSignal | null, Lane>>();
  /** Replicas known to have no /pause (route 404/405): they get the abort-and-continue fallback. */
  readonly #noPause = new Set<string>();
  /** Per replica: whether it answers GET /is_paused, asked once (see pausable()). */
  readonly #pausable = new Map<string, Promise<boolean>>();
  /** Replicas without POST /update_weight_version (404/405): the label is not sent again. */
  readonly #noLabel = new Set<string>();
  #paused: string[] = [];
  /** Replicas taken out in this update's begin(): a /pause may have landed before the failure. */
  #failed: string[] = [];
  /** Token requests on replicas without /pause stream (so an interruption keeps what was sampled): from the first begin(), or from the start. */
  armed = false;

  constructor(host: UpdateHost, options: EngineUpdateOptions = {}) {
    super();
    this.#host = host;
    this.#clearCache = options.clearCache ?? false;
    this.#resumeDelaysMs = options.resumeDelaysMs ?? RESUME_RETRY_DELAYS_MS;
  }

  /** Starts tracking a request on `url`; its signal also aborts with `parent`'s reason. */
  dispatch(url: string, parent?: AbortSignal): Dispatch {
    let lanes = this.#lanes.get(url);
    if (lanes === undefined) {
      lanes = new Map();
      this.#lanes.set(url, lanes);
    }
    const key = parent ?? null;
    let lane = lanes.get(key);
    if (lane === undefined) {
      const opened = new Lane(lanes, key);
      lane = opened;
      // One listener per parent signal, shared (deadline.ts): thousands of requests share a rollout's.
      if (parent?.aborted) opened.controller.abort(parent.reason);
      else if (parent) opened.leave = onParentAbort(parent, () => opened.controller.abort(parent.reason));
    }
    lane.requests++;
    this.inFlight++;
    return new Ticket(this, url, lane);
  }

  /**
   * Whether `url` has vLLM's pause routes, asked once with GET /is_paused (a 404/405 says
   * no). Only asked once armed: without updates nothing changes.
   */
  pausable(url: string): Promise<boolean> {
    if (this.#noPause.has(url)) return Promise.resolve(false);
    let known = this.#pausable.get(url);
    if (known === undefined) {
      known = this.#host.control("GET", `${serverRoot(url)}/is_paused`).then(
        () => true,
        (error: unknown) => {
          if (missingRoute(error)) {
            this.#noPause.add(url);
            return false;
          }
          // Not known (the replica is down): asked again next time.
          this.#pausable.delete(url);
          return true;
        },
      );
      this.#pausable.set(url, known);
    }
    return known;
  }

  /** Token requests on `url` stream, so an interruption keeps the tokens already sampled. */
  async streams(url: string): Promise<boolean> {
    return this.armed && !(await this.pausable(url));
  }

  /** Ends every request in flight on `url` with UpdateInterrupted and waits until each has let go. */
  async interrupt(url: string): Promise<number> {
    const lanes = this.#lanes.get(url);
    if (!lanes || lanes.size === 0) return 0;
    // Retired: requests dispatched from now on open new lanes.
    this.#lanes.delete(url);
    let interrupted = 0;
    const drained: Promise<void>[] = [];
    for (const lane of lanes.values()) {
      interrupted += lane.requests;
      lane.controller.abort(new UpdateInterrupted(url));
      drained.push(lane.drained());
    }
    await Promise.all(drained);
    return interrupted;
  }

  /**
   * The probe's last check of a replica out of routing that answers again: it comes back only
   * when not paused. One this policy paused is resumed (once, the probe retries) when no update
   * is open; one paused by someone else stays out, with the reason, until it is resumed.
   */
  async checkNotPaused(url: string): Promise<void> {
    if (this.#noPause.has(url)) return;
    const root = serverRoot(url);
    let answer: { is_paused?: unknown };
    try {
      answer = await this.#pausedAnswer(root);
    } catch (error) {
      if (missingRoute(error)) {
        this.#noPause.add(url);
        return;
      }
      // A gateway refusing the route says nothing of a pause; an engine failing it is not ready.
      if (error instanceof EngineError && !error.retryable) return;
      throw error;
    }
    if (answer?.is_paused !== true) {
      this.#mayBePaused.delete(url);
      return;
    }
    if (this.updating) throw new Error(`GET ${root}/is_paused answered true while a weight update is open`);
    if (!this.#mayBePaused.has(url))
      throw new Error(
        `GET ${root}/is_paused answered true outside a weight update, and rollgym did not pause it: out of routing until it is resumed`,
      );
    const failure = await this.#resume(url, []);
    if (failure !== null) throw new Error(`paused outside a weight update, and ${failure}`);
  }

  protected override async pauseEngines(mode: PauseMode, inFlight: number): Promise<EnginesPaused> {
    this.armed = true;
    const begun: EnginesPaused = {
      paused: 0,
      aborted: 0,
      out_of_routing: [],
      in_flight: inFlight,
      refused: [],
    };
    this.#paused = [];
    this.#failed = [];
    await Promise.all(
      this.#host.urls.map(async (url) => {
        // A replica already out is not routed to; its probe brings it back after the update.
        if (!this.#host.isHealthy(url)) return;
        const root = serverRoot(url);
        try {
          if (!this.#noPause.has(url)) {
            // Before the request: a /pause may land even when its answer is lost.
            this.#mayBePaused.add(url);
            await this.#host.control("POST", `${root}/pause?mode=${mode}&clear_cache=${this.#clearCache}`);
            const answer = await this.#pausedAnswer(root);
            if (answer?.is_paused !== true)
              throw new Error(`GET ${root}/is_paused answered ${JSON.stringify(answer)} after /pause`);
            this.#paused.push(url);
            begun.paused++;
            return;
          }
        } catch (error) {
          if (!missingRoute(error)) {
            const reason = `POST ${root}/pause: ${messageOf(error)}`;
            this.#failed.push(url);
            this.#host.takeOut(url, `refused to pause for a weight update: ${reason}`);
            begun.out_of_routing.push(url);
            begun.refused.push({ url, reason });
            await this.interrupt(url);
            return;
          }
          this.#noPause.add(url);
          this.#mayBePaused.delete(url);
        }
        await this.interrupt(url);
        begun.aborted++;
      }),
    );
    begun.out_of_routing.sort();
    begun.refused.sort(byUrl);
    if (begun.refused.length > 0 && begun.paused === 0 && begun.aborted === 0) {
      // Nothing is held for the trainer: the update fails, and no replica is left paused.
      const failed = this.#failed;
      this.#failed = [];
      await Promise.all(failed.map((url) => this.#resume(url, this.#resumeDelaysMs)));
      throw new RollgymError("engine_failed", {
        message: `no replica paused: ${begun.refused.map(({ url, reason }) => `${url} refused (${reason})`).join("; ")}`,
      });
    }
    return begun;
  }

  protected override pausedReplicas(): readonly string[] {
    return this.#paused;
  }

  protected override async resumeEngines(version: Version): Promise<EnginesResumed> {
    const paused = this.#paused;
    this.#paused = [];
    // Out of routing already, and kept out by their probe while paused: a /pause may have landed.
    const failed = this.#failed;
    this.#failed = [];
    for (const url of failed) void this.#resume(url, this.#resumeDelaysMs);
    const resumed: EnginesResumed = { failed_to_resume: [] };
    await Promise.all(
      paused.map(async (url) => {
        const failure = await this.#resume(url, this.#resumeDelaysMs, version.label);
        if (failure === null) return;
        // Still paused: requests frozen on it would never finish. They go elsewhere.
        resumed.failed_to_resume.push({ url, reason: failure });
        this.#host.takeOut(url, `failed to resume after a weight update: ${failure}`);
        await this.interrupt(url);
      }),
    );
    resumed.failed_to_resume.sort(byUrl);
    return resumed;
  }

  /** GET /is_paused at a replica's server root: `{is_paused: bool}` from vLLM, whatever else from others. */
  async #pausedAnswer(root: string): Promise<{ is_paused?: unknown }> {
    return (await this.#host.control("GET", `${root}/is_paused`)) as { is_paused?: unknown };
  }

  /**
   * Publishes `label` (where the engine has the route) and POSTs /resume until GET /is_paused
   * answers false, waiting `delays` between attempts; a 4xx would answer the same again and ends
   * the attempts. Null once resumed, else what failed.
   */
  async #resume(url: string, delays: readonly number[], label?: string): Promise<string | null> {
    const root = serverRoot(url);
    let failure = "";
    let attempts = 0;
    while (attempts <= delays.length) {
      if (attempts > 0) await sleep(delays[attempts - 1]);
      attempts++;
      let asked = `POST ${root}/update_weight_version`;
      try {
        if (label !== undefined && !this.#noLabel.has(url)) {
          await this.#host
            .control("POST", `${root}/update_weight_version`, { new_version: label })
            .catch((error: unknown) => {
              if (!missingRoute(error)) throw error;
              this.#noLabel.add(url);
            });
        }
        asked = `POST ${root}/resume`;
        await this.#host.control("POST", `${root}/resume`);
        asked = `GET ${root}/is_paused`;
        const answer = await this.#pausedAnswer(root);
        if (answer?.is_paused === false) {
          this.#mayBePaused.delete(url);
          return null;
        }
        failure = `${asked} answered ${JSON.stringify(answer)} after POST /resume`;
      } catch (error) {
        failure = `${asked}: ${messageOf(error)}`;
        if (error instanceof EngineError && !error.retryable) break;
      }
    }
    return `${failure} (${attempts} ${attempts === 1 ? "attempt" : "attempts"})`;
  }
}

/** What a routed request is told of its dispatch: its signal (an update's interruption included) and version. */
export type Sent = Pick<Dispatch, "version" | "epoch"> & {
  signal: AbortSignal | undefined;
  /** The policy's headers, with the session header on generation requests. */
  headers: Record<string, string>;
  /** Fields a generation request adds to its body (cache_salt). */
  body?: Record<string, unknown>;
};
