// The trainer's weight updates over the protocol (PROTOCOL.md "Weight updates"): which session is
// the trainer, the one update that may be open, and the server's own admission gate, closed from
// begin_update until the engines run the new version (facts/async-rl.md §1.2: close your own gate
// before pausing, reopen it only after resume returns). The policy pauses and resumes the engines
// (src/llm/versions.ts); this module decides when, and who may ask.
import type { FastifyBaseLogger } from "fastify";
import {
  MAX_VERSION_ORDINAL,
  type UpdateBegun,
  type UpdateEnded,
  type Version,
} from "../../protocol/messages.ts";
import { errorFrame, messageOf } from "../errors/boundary.ts";
import { RollgymError } from "../errors/catalogue.ts";
import type { Policy } from "../llm/policy.ts";
import {
  type EnginesResumed,
  INITIAL_VERSION,
  type PauseMode,
  type UpdateEngines,
  type WeightUpdates,
} from "../llm/versions.ts";
import { DeliveredAges } from "./delivery/ages.ts";
import type { ServerMetrics, UpdateGauges } from "./metrics.ts";
import type { Session } from "./session.ts";

interface OpenUpdate {
  id: string;
  /** The version begin_update announced: end_update must name this one. */
  announced: Version | null;
  /** True once every engine is paused (update_begun was answered). */
  begun: boolean;
  /** An accepted end_update is resuming the engines (it may still fail and leave the update open). */
  ending: boolean;
  /** Nobody will end it: the server resumes the engines at the old version (the trainer left, or max_update_s passed). */
  dropped: "abandoned" | "expired" | null;
  /** Ends it at max_update_s. */
  timer: NodeJS.Timeout | null;
  /** When begin_update came (Date.now()), for its age on /healthz, /metrics and in the log. */
  since: number;
  /** What pausing held: update_begun's counts, 0 until it is answered. */
  held: { paused: number; aborted: number };
  /** Another server pauses the shared engines (begin_update's `engines`): said in both answers. */
  heldElsewhere: boolean;
}

/** How long an update may stay open, and where the server says what it did about one that did not end. */
export interface UpdateOptions {
  maxUpdateMs: number;
  log?: FastifyBaseLogger;
  /** resume_grace_s in ms: how long a trainer whose connection is gone may come back (for the messages). */
  resumeGraceMs?: number;
}

/** The open update as /healthz shows it (docs/server.md "Routes"). */
export interface OpenUpdateStatus {
  id: string;
  /** Seconds since its begin_update. */
  age_s: number;
  /** "pausing" until update_begun was answered, then "paused" (or "ending" while end_update resumes the engines). */
  state: "pausing" | "paused" | "ending";
  /** Replicas paused by their own /pause, and those whose requests were aborted instead (update_begun's counts). */
  paused: number;
  aborted: number;
  /** The version the engines run until end_update. */
  version: Version;
  /** The trainer's connection: "connected", or "disconnected" (in its resume grace) since `trainer_gone_s`. */
  trainer: "connected" | "disconnected";
  trainer_gone_s?: number;
}

/** What a trainer's welcome says about updates. */
export interface TrainerWelcome {
  version: Version;
  /** The update left open by a trainer that disconnected (its successor may end it). */
  update?: { id: string; begun: boolean; version?: Version };
}

export class UpdateCoordinator {
  private readonly policy: Policy;
  private trainerSession: Session | null = null;
  private open: OpenUpdate | null = null;
  private readonly listeners = new Set<() => void>();
  /** Ages of the groups delivered since the last update began (update_begun's `ages`). */
  readonly delivered = new DeliveredAges();
  /** True once any update has begun: versions appear on the wire from then on. */
  used = false;
  private readonly metrics: ServerMetrics | null;
  private readonly options: UpdateOptions;
  /** The last update that expired: a late end_update for it is told so. */
  private expired: { id: string; version: Version } | null = null;
  /** When the trainer's connection went, and which one (a resumed trainer is on another). */
  private trainerLost: { at: number; out: Session["outbound"] } | null = null;

  constructor(policy: Policy, metrics: ServerMetrics | null, options: UpdateOptions) {
    this.policy = policy;
    this.metrics = metrics;
    this.options = options;
  }

  /** max_update_s, in seconds (for the messages). */
  private get maxUpdateS(): number {
    return this.options.maxUpdateMs / 1000;
  }

  /** The version the engines run (the one before an open update). */
  get current(): Version {
    return this.policy.updates?.().current ?? INITIAL_VERSION;
  }

  /** True while new groups must wait: from begin_update until the engines run the new version. */
  get closed(): boolean {
    return this.open !== null;
  }

  get trainer(): Session | null {
    return this.trainerSession;
  }

  /** `listener` runs on every change of the gate or the version; returns its removal. */
  onChange(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * `session` says it is the trainer. A trainer whose connection is gone (in its resume grace)
   * gives way, and an update it left open passes to the new one; a connected one does not.
   */
  claimTrainer(session: Session): TrainerWelcome {
    this.mayClaim(session);
    this.trainerBack(session);
    this.trainerSession = session;
    const welcome: TrainerWelcome = { version: { ...this.current } };
    const open = this.open;
    if (open && open.dropped === null)
      welcome.update = {
        id: open.id,
        begun: open.begun,
        ...(open.announced ? { version: open.announced } : {}),
      };
    return welcome;
  }

  /** Throws trainer_taken when another trainer is connected (`session` null: a new session). */
  mayClaim(session: Session | null): void {
    const old = this.trainerSession;
    if (old !== null && old !== session && old.outbound !== null)
      throw new RollgymError("trainer_taken", { session: old.id });
  }

  /** `session` ended for good: if it was the trainer, an update it left open ends at the old version. */
  async sessionEnded(session: Session): Promise<void> {
    if (this.trainerSession !== session) return;
    this.trainerSession = null;
    const open = this.open;
    if (open !== null && open.dropped === null)
      this.options.log?.warn(
        { update: open.id, session: session.id },
        `${this.describe()}: its trainer's session ended, so the engines resume at the old version and admission reopens`,
      );
    // Nobody can end it: the engines resume under the version they had (docs/server.md).
    if (open !== null) await this.drop(open, "abandoned");
  }

  async begin(
    session: Session,
    id: string,
    mode: PauseMode | undefined,
    announced?: Version,
    engines?: UpdateEngines,
  ): Promise<UpdateBegun> {
    const updates = this.checked(session, "begin_update");
    if (this.open) throw new RollgymError("update_open", { id, open: this.open.id });
    // An update that began now could never end (no ordinal would be greater): the engines stay up.
    const { label, ordinal } = this.current;
    if (ordinal >= MAX_VERSION_ORDINAL) throw new RollgymError("ordinals_exhausted", { id, ordinal, label });
    // A version end_update could not name is refused now, before any engine pauses.
    if (announced) this.checkNewVersion(announced, id, "begin");
    const open: OpenUpdate = {
      id,
      announced: announced ? { label: announced.label, ordinal: announced.ordinal } : null,
      begun: false,
      ending: false,
      dropped: null,
      timer: null,
      since: Date.now(),
      held: { paused: 0, aborted: 0 },
      heldElsewhere: engines === "held_elsewhere",
    };
    // The gate closes before any engine is asked to pause, so no new group slips in meanwhile.
    this.open = open;
    this.used = true;
    this.expired = null;
    open.timer = setTimeout(() => void this.expire(open), this.options.maxUpdateMs);
    open.timer.unref();
    this.changed();
    const version = { ...this.current };
    const ages = this.delivered.take();
    try {
      const begun = await updates.begin(mode, engines);
      open.held = { paused: begun.paused, aborted: begun.aborted };
      open.begun = true;
      this.changed();
      for (const { url, reason } of begun.refused)
        this.options.log?.warn({ update: id, replica: url }, `replica refused to pause: ${reason}`);
      return {
        type: "update_begun",
        id,
        version,
        ...heldElsewhere(open),
        ...begun,
        ...(ages ? { ages } : {}),
      };
    } catch (error) {
      this.options.log?.warn({ update: id, err: error }, "pausing the engines failed");
      this.close(open);
      this.metrics?.weightUpdates.inc({ outcome: "failed" });
      throw new RollgymError("update_failed", {
        message: `begin_update ${JSON.stringify(id)}: pausing the engines failed: ${messageOf(error)}; admission is open again at version ${JSON.stringify(version.label)}`,
      });
    }
  }

  async end(session: Session, id: string, version: Version): Promise<UpdateEnded> {
    const updates = this.checked(session, "end_update");
    const open = this.open;
    if (this.expired?.id === id) throw this.expiry(this.expired, true);
    if (open === null || open.dropped !== null) throw new RollgymError("no_update", { id });
    if (open.id !== id) throw new RollgymError("update_id", { id, open: open.id });
    if (!open.begun) throw new RollgymError("update_pausing", { id });
    if (open.ending) throw new RollgymError("update_ending", { id });
    // Held elsewhere, the update may end at the version in force: the server holding the engines
    // failed to pause them, so no weights moved and admission just reopens (docs/ray.md).
    const unmoved = open.heldElsewhere && sameVersion(version, this.current);
    const announced = open.announced;
    if (!unmoved && announced && !sameVersion(announced, version))
      throw new RollgymError("update_version", { id, got: version, announced });
    if (!unmoved) this.checkNewVersion(version, id, "end");
    open.ending = true;
    let resumed: EnginesResumed;
    try {
      resumed = await updates.end({ label: version.label, ordinal: version.ordinal });
    } catch (error) {
      open.ending = false;
      this.changed();
      throw new RollgymError("update_failed", {
        message: `end_update ${JSON.stringify(id)}: resuming the engines failed: ${messageOf(error)}; the update stays open`,
      });
    }
    this.metrics?.weightUpdates.inc({ outcome: "ended" });
    this.close(open);
    for (const { url, reason } of resumed.failed_to_resume)
      this.options.log?.warn({ update: id, replica: url }, `replica failed to resume: ${reason}`);
    return { type: "update_ended", id, version: { ...this.current }, ...heldElsewhere(open), ...resumed };
  }

  /** max_update_s passed with `open` still open: ended at the old version, the trainer told. */
  private async expire(open: OpenUpdate): Promise<void> {
    const log = this.options.log;
    try {
      await this.drop(open, "expired");
    } catch (error) {
      log?.error({ err: error, update: open.id }, "resuming the engines after an expired update failed");
    }
    // Told once the engines run again (or failed to): the trainer's next begin_update is then taken.
    if (open.dropped !== "expired" || this.expired?.id !== open.id) return;
    const error = this.expiry(this.expired, false);
    log?.warn({ update: open.id, maxUpdateS: this.maxUpdateS }, error.message);
    try {
      this.trainerSession?.sendNow(errorFrame(error));
    } catch (sendError) {
      log?.error({ err: sendError }, "telling the trainer its update expired failed");
    }
  }

  private expiry(expired: { id: string; version: Version }, late: boolean): RollgymError {
    const { id, version } = expired;
    return new RollgymError("update_expired", {
      id,
      late,
      maxS: this.maxUpdateS,
      label: version.label,
      ordinal: version.ordinal,
    });
  }

  /**
   * Nobody will end `open`: once it has begun and no end_update is resuming the engines (that
   * one may still fail), the engines resume under the version in force before it.
   */
  private async drop(open: OpenUpdate, why: "abandoned" | "expired"): Promise<void> {
    await this.until(() => this.open !== open || (open.begun && !open.ending));
    if (this.open !== open || open.dropped !== null) return;
    open.dropped = why;
    if (why === "expired") this.expired = { id: open.id, version: { ...this.current } };
    this.metrics?.weightUpdates.inc({ outcome: why });
    try {
      await this.updates("end_update").end({ ...this.current });
    } finally {
      this.close(open);
    }
  }

  /** `version` may follow the one in force: its ordinal greater, and within what the wire carries. */
  private checkNewVersion(version: Version, id: string, at: "begin" | "end"): void {
    if (version.ordinal > MAX_VERSION_ORDINAL)
      throw new RollgymError("version_ordinal_max", {
        ordinal: version.ordinal,
        max: MAX_VERSION_ORDINAL,
        id,
        at,
      });
    const current = this.current;
    if (version.ordinal <= current.ordinal)
      throw new RollgymError("version_not_increasing", {
        ordinal: version.ordinal,
        current: current.ordinal,
        label: current.label,
        id,
        at,
      });
  }

  /** The open update for /healthz; null when none is open (or one nobody will end is resuming the engines). */
  status(now = Date.now()): OpenUpdateStatus | null {
    const open = this.open;
    if (open === null || open.dropped !== null) return null;
    const gone = this.trainerGoneMs(now);
    return {
      id: open.id,
      age_s: seconds(now - open.since),
      state: open.ending ? "ending" : open.begun ? "paused" : "pausing",
      paused: open.held.paused,
      aborted: open.held.aborted,
      version: { ...this.current },
      trainer: gone === null ? "connected" : "disconnected",
      ...(gone === null ? {} : { trainer_gone_s: seconds(gone) }),
    };
  }

  /** What /metrics shows of the updates. */
  gauges(now = Date.now()): UpdateGauges {
    const status = this.status(now);
    return {
      open: this.open !== null,
      ageS: status?.age_s ?? 0,
      pausedReplicas: status?.paused ?? 0,
      ordinal: this.current.ordinal,
      trainerConnected: this.trainerSession !== null && this.trainerGoneMs(now) === null,
    };
  }

  /**
   * The open update in one phrase, for the log and for the clients it holds: its id, age, what
   * is paused, the version in force and where its trainer is. Null when none is open.
   */
  describe(now = Date.now()): string | null {
    const status = this.status(now);
    if (status === null) return null;
    const { id, age_s, paused, version, trainer_gone_s } = status;
    const grace = this.options.resumeGraceMs;
    const trainer =
      trainer_gone_s === undefined
        ? "its trainer is connected"
        : `its trainer's connection has been gone for ${trainer_gone_s} s` +
          (grace === undefined
            ? ""
            : ` (if it does not resume within resume_grace_s, ${grace / 1000} s, the engines resume at ${JSON.stringify(version.label)})`);
    return `weight update ${JSON.stringify(id)} open for ${age_s} s (${paused} replica${paused === 1 ? "" : "s"} paused, version ${JSON.stringify(version.label)} (ordinal ${version.ordinal}) in force); ${trainer}`;
  }

  /**
   * `session`'s connection closed (`why`: its close code, or the heartbeat that ended it). When
   * it is the trainer and an update is open, logged at once; returns the open update's
   * description then (for the clients it holds), else null.
   */
  connectionLost(session: Session, why: string): string | null {
    if (this.trainerSession !== session) return null;
    this.trainerLost = { at: Date.now(), out: session.outbound };
    const described = this.describe();
    if (described === null) return null;
    this.options.log?.warn(
      { update: this.open?.id, session: session.id },
      `the trainer's connection is gone mid-update (${why}): ${described}`,
    );
    return described;
  }

  /** `session` is the trainer again (resumed, or a successor): said in the log when an update is open. */
  private trainerBack(session: Session): void {
    const lost = this.trainerLost;
    this.trainerLost = null;
    const open = this.status();
    if (lost === null || open === null) return;
    this.options.log?.info(
      { update: open.id, session: session.id },
      `a trainer took up weight update ${JSON.stringify(open.id)} again, ${seconds(Date.now() - lost.at)} s after its trainer's connection went`,
    );
  }

  /** Milliseconds since the trainer's connection went; null while it is connected. */
  private trainerGoneMs(now: number): number | null {
    const trainer = this.trainerSession;
    const lost = this.trainerLost;
    const out = trainer?.outbound ?? null;
    if (out !== null && out !== lost?.out) return null;
    return lost === null ? 0 : now - lost.at;
  }

  private checked(session: Session, type: string): WeightUpdates {
    if (this.trainerSession !== session) throw new RollgymError("not_trainer", { type });
    return this.updates(type);
  }

  private updates(type: string): WeightUpdates {
    const updates = this.policy.updates?.();
    if (!updates) throw new RollgymError("updates_unsupported", { policy: this.policy.name, type });
    return updates;
  }

  /** Resolves once `done()` holds, checked now and on every change. */
  private until(done: () => boolean): Promise<void> {
    if (done()) return Promise.resolve();
    return new Promise((resolve) => {
      const stop = this.onChange(() => {
        if (done()) {
          stop();
          resolve();
        }
      });
    });
  }

  private close(open: OpenUpdate): void {
    if (this.open !== open) return;
    if (open.timer) clearTimeout(open.timer);
    this.open = null;
    this.changed();
  }

  private changed(): void {
    for (const listener of [...this.listeners]) listener();
  }
}

/** The answers' `engines` field: present only when another server holds the engines (frames stay as they were). */
function heldElsewhere(open: OpenUpdate): { engines?: "held_elsewhere" } {
  return open.heldElsewhere ? { engines: "held_elsewhere" } : {};
}

function sameVersion(a: Version, b: Version): boolean {
  return a.label === b.label && a.ordinal === b.ordinal;
}

/** Milliseconds as seconds to one decimal. */
function seconds(ms: number): number {
  return Math.round(ms / 100) / 10;
}
