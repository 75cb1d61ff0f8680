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
import { type EnginesResumed, INITIAL_VERSION, type PauseMode, type WeightUpdates } from "../llm/versions.ts";
import type { ServerMetrics } from "./metrics.ts";
import type { Session } from "./session.ts";

interface OpenUpdate {
  id: string;
  /** True once every engine is paused (update_begun was answered). */
  begun: boolean;
  /** An accepted end_update is resuming the engines (it may still fail and leave the update open). */
  ending: boolean;
  /** Nobody will end it: the server resumes the engines at the old version (the trainer left, or max_update_s passed). */
  dropped: "abandoned" | "expired" | null;
  /** Ends it at max_update_s. */
  timer: NodeJS.Timeout | null;
}

/** How long an update may stay open, and where the server says what it did about one that did not end. */
export interface UpdateOptions {
  maxUpdateMs: number;
  log?: FastifyBaseLogger;
}

/** What a trainer's welcome says about updates. */
export interface TrainerWelcome {
  version: Version;
  /** The update left open by a trainer that disconnected (its successor may end it). */
  update?: { id: string; begun: boolean };
}

export class UpdateCoordinator {
  private readonly policy: Policy;
  private trainerSession: Session | null = null;
  private open: OpenUpdate | null = null;
  private readonly listeners = new Set<() => void>();
  /** True once any update has begun: versions appear on the wire from then on. */
  used = false;
  private readonly metrics: ServerMetrics | null;
  private readonly options: UpdateOptions;
  /** The last update that expired: a late end_update for it is told so. */
  private expired: { id: string; version: Version } | null = null;

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
    this.trainerSession = session;
    const welcome: TrainerWelcome = { version: { ...this.current } };
    const open = this.open;
    if (open && open.dropped === null) welcome.update = { id: open.id, begun: open.begun };
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
    // Nobody can end it: the engines resume under the version they had (docs/server.md).
    if (open !== null) await this.drop(open, "abandoned");
  }

  async begin(session: Session, id: string, mode: PauseMode | undefined): Promise<UpdateBegun> {
    const updates = this.checked(session, "begin_update");
    if (this.open) throw new RollgymError("update_open", { id, open: this.open.id });
    // An update that began now could never end (no ordinal would be greater): the engines stay up.
    const { label, ordinal } = this.current;
    if (ordinal >= MAX_VERSION_ORDINAL) throw new RollgymError("ordinals_exhausted", { id, ordinal, label });
    const open: OpenUpdate = { id, begun: false, ending: false, dropped: null, timer: null };
    // The gate closes before any engine is asked to pause, so no new group slips in meanwhile.
    this.open = open;
    this.used = true;
    this.expired = null;
    open.timer = setTimeout(() => void this.expire(open), this.options.maxUpdateMs);
    open.timer.unref();
    this.changed();
    const version = { ...this.current };
    try {
      const begun = await updates.begin(mode);
      open.begun = true;
      this.changed();
      for (const { url, reason } of begun.refused)
        this.options.log?.warn({ update: id, replica: url }, `replica refused to pause: ${reason}`);
      return { type: "update_begun", id, version, ...begun };
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
    if (version.ordinal > MAX_VERSION_ORDINAL)
      throw new RollgymError("version_ordinal_max", { ordinal: version.ordinal, max: MAX_VERSION_ORDINAL });
    const current = this.current;
    if (version.ordinal <= current.ordinal)
      throw new RollgymError("version_not_increasing", {
        ordinal: version.ordinal,
        current: current.ordinal,
        label: current.label,
      });
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
    return { type: "update_ended", id, version: { ...this.current }, ...resumed };
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
