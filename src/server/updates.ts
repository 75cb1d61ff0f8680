// The trainer's weight updates over the protocol (PROTOCOL.md "Weight updates"): which session is
// the trainer, the one update that may be open, and the server's own admission gate, closed from
// begin_update until the engines run the new version (facts/async-rl.md §1.2: close your own gate
// before pausing, reopen it only after resume returns). The policy pauses and resumes the engines
// (src/llm/versions.ts); this module decides when, and who may ask.
import type { UpdateBegun, UpdateEnded, Version } from "../../protocol/messages.ts";
import { messageOf } from "../errors/boundary.ts";
import { RollgymError } from "../errors/catalogue.ts";
import type { Policy } from "../llm/policy.ts";
import { INITIAL_VERSION, type PauseMode, type PolicyVersion, type WeightUpdates } from "../llm/versions.ts";
import type { ServerMetrics } from "./metrics.ts";
import type { Session } from "./session.ts";

interface OpenUpdate {
  id: string;
  /** True once every engine is paused (update_begun was answered). */
  begun: boolean;
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

  constructor(policy: Policy, metrics: ServerMetrics | null = null) {
    this.policy = policy;
    this.metrics = metrics;
  }

  /** The version the engines run (the one before an open update). */
  get current(): PolicyVersion {
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
    if (this.open) welcome.update = { ...this.open };
    return welcome;
  }

  /** Throws trainer_taken when another trainer is connected (`session` null: a new session). */
  mayClaim(session: Session | null): void {
    const old = this.trainerSession;
    if (old !== null && old !== session && old.outbound !== null)
      throw new RollgymError("trainer_taken", { session: old.id });
  }

  /** `session` ended for good: if it was the trainer, an update it left open ends at the old version. */
  sessionEnded(session: Session): Promise<void> {
    if (this.trainerSession !== session) return Promise.resolve();
    this.trainerSession = null;
    const open = this.open;
    if (open === null) return Promise.resolve();
    // Nobody can end it: the engines resume under the version they had (docs/server.md).
    this.metrics?.weightUpdates.inc({ outcome: "abandoned" });
    const resume = async (): Promise<void> => {
      if (!open.begun) await this.whenBegun(open);
      if (this.open !== open) return;
      try {
        await this.updates("end_update").end({ ...this.current });
      } finally {
        this.close(open);
      }
    };
    return resume();
  }

  async begin(session: Session, id: string, mode: PauseMode | undefined): Promise<UpdateBegun> {
    const updates = this.checked(session, "begin_update");
    if (this.open) throw new RollgymError("update_open", { id, open: this.open.id });
    const open: OpenUpdate = { id, begun: false };
    // The gate closes before any engine is asked to pause, so no new group slips in meanwhile.
    this.open = open;
    this.used = true;
    this.changed();
    const version = { ...this.current };
    try {
      const begun = await updates.begin(mode);
      open.begun = true;
      this.changed();
      return { type: "update_begun", id, version, ...begun };
    } catch (error) {
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
    if (open === null) throw new RollgymError("no_update", { id });
    if (open.id !== id) throw new RollgymError("update_id", { id, open: open.id });
    if (!open.begun) throw new RollgymError("update_pausing", { id });
    const current = this.current;
    if (version.ordinal <= current.ordinal)
      throw new RollgymError("version_not_increasing", {
        ordinal: version.ordinal,
        current: current.ordinal,
        label: current.label,
      });
    // A second end_update while this one resumes the engines finds the update still open but
    // ending; it is refused as an end of no update once this one closes it.
    open.begun = false;
    try {
      await updates.end({ label: version.label, ordinal: version.ordinal });
    } catch (error) {
      open.begun = true;
      throw new RollgymError("update_failed", {
        message: `end_update ${JSON.stringify(id)}: resuming the engines failed: ${messageOf(error)}; the update stays open`,
      });
    }
    this.metrics?.weightUpdates.inc({ outcome: "ended" });
    this.close(open);
    return { type: "update_ended", id, version: { ...this.current } };
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

  private whenBegun(open: OpenUpdate): Promise<void> {
    return new Promise((resolve) => {
      const stop = this.onChange(() => {
        if (open.begun || this.open !== open) {
          stop();
          resolve();
        }
      });
    });
  }

  private close(open: OpenUpdate): void {
    if (this.open !== open) return;
    this.open = null;
    this.changed();
  }

  private changed(): void {
    for (const listener of [...this.listeners]) listener();
  }
}
