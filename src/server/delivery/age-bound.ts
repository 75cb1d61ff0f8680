// strict_staleness (PROTOCOL.md "Staleness"): the order in which a stream's finished groups go
// out, so that none is trained more than max_staleness S versions old by a trainer that takes
// groups_per_step B groups per update in arrival order (the trainer the capacity rule assumes).
//
// Such a trainer trains the n-th group it receives (from 0) at step ⌊n ÷ B⌋ after the stream
// began. A group admitted v versions after the stream began ran every turn at v or later, so it
// is young enough if it is among the first (v + S + 1) × B groups sent: step v + S is its
// deadline. The capacity rule already admits no more groups than the deadlines have places for;
// what breaks the bound is order, a long group overtaken by younger ones that take its place.
// So a finished group goes out only if every group still owed (playing or held) keeps a place in
// the steps up to its own deadline; otherwise it waits (earliest deadline first). The group owed
// by the earliest deadline always fits, so a long group itself never waits. Nothing is discarded
// and nothing is stamped for a later step (which would only make it older); the price is that
// the trainer waits for a long group instead of training on a younger one ahead of it.

interface Held {
  deadline: number;
  send: () => void;
}

export class AgeBound {
  private readonly perStep: number;
  /** Groups sent so far: the next one is trained at step ⌊sent ÷ B⌋. */
  private sent = 0;
  /** Groups admitted and not sent (playing or held), by deadline. */
  private readonly owed = new Map<number, number>();
  /** Finished groups waiting for their turn, in the order they finished. */
  private readonly held: Held[] = [];

  constructor(perStep: number) {
    this.perStep = perStep;
  }

  /** Finished groups waiting for an earlier one. */
  get holding(): number {
    return this.held.length;
  }

  /** A group was admitted: it must be trained by step `deadline` (its admission version + S). */
  admit(deadline: number): void {
    this.owed.set(deadline, (this.owed.get(deadline) ?? 0) + 1);
  }

  /** A group admitted under `deadline` will never be sent (not started, or dropped for its age). */
  forget(deadline: number): void {
    this.settle(deadline);
    this.release();
  }

  /** A group finished: `send` runs now if that keeps every deadline, else once it does. */
  finished(deadline: number, send: () => void): void {
    this.held.push({ deadline, send });
    this.release();
  }

  private release(): void {
    for (;;) {
      let next = -1;
      for (let i = 0; i < this.held.length; i++)
        if (next < 0 || this.held[i].deadline < this.held[next].deadline) next = i;
      // The earliest deadline goes first; if it must wait, so must every later one.
      if (next < 0 || !this.fits(this.held[next].deadline)) return;
      const [group] = this.held.splice(next, 1);
      this.settle(group.deadline);
      this.sent++;
      group.send();
    }
  }

  /**
   * Whether a group due by `deadline` may take the next place (step ⌊sent ÷ B⌋): the groups owed
   * by every earlier deadline d must still fit in the places left up to step d.
   */
  private fits(deadline: number): boolean {
    const B = this.perStep;
    const step = Math.floor(this.sent / B);
    let owedBy = 0;
    for (const d of [...this.owed.keys()].sort((a, b) => a - b)) {
      if (d >= deadline) break;
      owedBy += this.owed.get(d) ?? 0;
      if (d >= step && owedBy > (d + 1) * B - this.sent - 1) return false;
    }
    return true;
  }

  private settle(deadline: number): void {
    const left = (this.owed.get(deadline) ?? 0) - 1;
    if (left > 0) this.owed.set(deadline, left);
    else this.owed.delete(deadline);
  }
}
