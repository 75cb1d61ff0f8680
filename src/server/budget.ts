// The server's two budgets (docs/server.md "Episode budget" and "Memory budget"): episodes held,
// and the bytes everything held really stores (rollouts in flight, groups held for resume, env
// sessions), each with a session's share and the server's total. What a request would hold is
// checked against both; a stream rollout's next group waits for room in both; a rollout whose
// turns take the bytes past a bound is cancelled (shed) before V8's heap limit is reached.
// Sessions report every change of what they hold; state.episodesInFlight and state.memory.held
// are the sums.
import { WaitQueue } from "../concurrency/wait-queue.ts";
import { errorFrame } from "../errors/boundary.ts";
import { RollgymError } from "../errors/catalogue.ts";
import { MemoryReturn } from "./memory-return.ts";
import { type HeldKind, Session, type SessionMemory } from "./session.ts";
import type { ServerMemory, ServerState } from "./state.ts";

/** The bytes one session holds, charged into the server's budget. */
export class MemoryAccount implements SessionMemory {
  private readonly budget: MemoryBudget;
  held = 0;
  readonly kinds: Record<HeldKind, number> = { rollouts: 0, groups: 0, env: 0 };
  private closed = false;
  /** Cancels one running rollout of the session to give memory back (`why` goes to its client); false when none. */
  shed: (why: string) => boolean = () => false;

  constructor(budget: MemoryBudget) {
    this.budget = budget;
  }

  /** Counts `bytes` more (or fewer, when negative) held; nothing once the session has ended. */
  charge(kind: HeldKind, bytes: number): void {
    if (this.closed || bytes === 0) return;
    this.held += bytes;
    this.kinds[kind] += bytes;
    this.budget.changed(this, kind, bytes);
  }

  /** The session ended: everything it held goes at once; later charges change nothing. */
  close(): void {
    if (this.closed) return;
    for (const kind of Object.keys(this.kinds) as HeldKind[]) this.charge(kind, -this.kinds[kind]);
    this.closed = true;
    this.budget.forget(this);
  }
}

/** The server-wide memory budget (max_held_bytes) and each session's share of it. */
export class MemoryBudget implements ServerMemory {
  /** max_held_bytes: what all sessions together may hold. */
  readonly max: number;
  /** max_held_bytes_per_connection: what one session may hold. */
  readonly share: number;
  held = 0;
  readonly kinds: Record<HeldKind, number> = { rollouts: 0, groups: 0, env: 0 };
  /** Rollouts cancelled to stay within the budget, since the server started. */
  shed = 0;
  private readonly accounts = new Set<MemoryAccount>();
  private readonly released: () => void;
  /** Gives V8's pooled pages back after large releases (memory-return.ts). */
  readonly giveBack = new MemoryReturn();

  /** `released` runs after bytes were given back (waiting stream groups may fit now). */
  constructor(max: number, share: number, released: () => void = () => {}) {
    this.max = max;
    this.share = Math.min(share, max);
    this.released = released;
  }

  account(): MemoryAccount {
    const account = new MemoryAccount(this);
    this.accounts.add(account);
    return account;
  }

  /** Whether `bytes` more fit the account's share and the total. */
  fits(account: SessionMemory, bytes: number): boolean {
    return this.held + bytes <= this.max && account.held + bytes <= this.share;
  }

  /** Why holding `bytes` more would pass the share or the total, or null when it fits. */
  refusal(account: SessionMemory, bytes: number, what: string): string | null {
    if (this.held + bytes > this.max)
      return `max_held_bytes is ${this.max}; ${this.held} bytes are held over all sessions (${this.describe(this.kinds)}) and ${what} needs ${bytes}`;
    if (account.held + bytes > this.share)
      return `max_held_bytes_per_connection is ${this.share}; this session holds ${account.held} bytes (${this.describe(account.kinds)}) and ${what} needs ${bytes}`;
    return null;
  }

  /** The account's change, as MemoryAccount.charge made it. */
  changed(account: MemoryAccount, kind: HeldKind, bytes: number): void {
    this.held += bytes;
    this.kinds[kind] += bytes;
    this.giveBack.held(this.held);
    if (bytes < 0) this.released();
    // Rollouts grow as they play, unasked: past a bound, one is cancelled to make room.
    else if (kind === "rollouts" && (this.held > this.max || account.held > this.share))
      this.shedFor(account);
  }

  forget(account: MemoryAccount): void {
    this.accounts.delete(account);
  }

  /**
   * Cancels a running rollout: the account's own when it is past its share, else one of the
   * session holding the most (a bystander holding little keeps its rollouts).
   */
  private shedFor(account: MemoryAccount): void {
    const why = (limit: string, value: number, by: string, held: MemoryAccount | MemoryBudget) =>
      `${limit} is ${value}; ${held.held} bytes were held ${by} (${this.describe(held.kinds)}), so this rollout is cancelled to stay within it`;
    if (account.held > this.share) {
      const message = why("max_held_bytes_per_connection", this.share, "by this session", account);
      if (account.shed(message)) this.shed++;
      return;
    }
    const message = why("max_held_bytes", this.max, "over all sessions", this);
    const largest = [...this.accounts].sort((a, b) => b.held - a.held);
    for (const candidate of largest)
      if (candidate.shed(message)) {
        this.shed++;
        return;
      }
  }

  private describe(kinds: Record<HeldKind, number>): string {
    return `rollouts in flight ${kinds.rollouts}, groups held for acknowledgement ${kinds.groups}, env sessions ${kinds.env}`;
  }
}

/** Rollouts cancelled to stay within the memory budget (each is shed once). */
const shedRollouts = new WeakSet<object>();

/** A new session with its memory account, whose rollouts the budget may shed. */
export function openSession(state: ServerState): Session {
  const account = state.memory.account();
  const session = new Session(budgetReporter(state), account);
  account.shed = (why) => {
    // The newest rollout still playing that has not been shed yet.
    const running = [...session.rollouts.values()].filter((r) => r.batch === null && !shedRollouts.has(r));
    const victim = running.at(-1);
    if (!victim) return false;
    shedRollouts.add(victim);
    session.sendNow(errorFrame(new RollgymError("memory_shed", { message: why }), { rollout: victim.id }));
    victim.cancel();
    return true;
  };
  return session;
}

/** A stream group waiting for room: woken once its episodes are held. */
interface Waiter {
  session: Session;
  episodes: number;
  /** What its episodes will be charged when held (episodesBytes). */
  bytes: number;
  /** Charges what the group holds, in the same step as its episodes are held. */
  held: () => void;
}

/** Stream groups waiting for budget, per server, oldest first. */
const waiting = new WeakMap<ServerState, WaitQueue<Waiter>>();
/** Servers whose waiting groups are to be admitted once the current step is done. */
const admitting = new WeakSet<ServerState>();

/** The callback a new session reports its changes to. */
function budgetReporter(state: ServerState): (delta: number) => void {
  return (delta) => {
    state.episodesInFlight += delta;
    if (delta < 0) admitWaiting(state);
  };
}

/**
 * Holds the episodes of every waiting group that fits, oldest first, once the current step is
 * done: an acknowledgement gives back episodes and bytes, one group after another, and the
 * waiting groups are looked at once for all of it.
 */
export function admitWaiting(state: ServerState): void {
  const queue = waiting.get(state);
  if (!queue || queue.size === 0 || admitting.has(state)) return;
  admitting.add(state);
  queueMicrotask(() => {
    admitting.delete(state);
    queue.wakeWhere((waiter) => {
      if (!fitsBudget(state, waiter.session, waiter.episodes, waiter.bytes)) return false;
      // Held and charged before the next waiter is looked at, so each fits against what the
      // ones before it took, not against the same free room.
      waiter.session.hold(waiter.episodes);
      waiter.held();
      return true;
    });
  });
}

/** Whether `episodes` more, charged `bytes`, fit the session's share and the server's total. */
function fitsBudget(state: ServerState, session: Session, episodes: number, bytes: number): boolean {
  const { maxEpisodesPerConnection: share, maxEpisodesInFlight: total } = state.options;
  return (
    state.episodesInFlight + episodes <= total &&
    session.episodesHeld + episodes <= share &&
    state.memory.fits(session.memory, bytes)
  );
}

/**
 * Why holding `episodes` more, charged `bytes` (episodesBytes: what they will be charged when
 * held), would pass the session's share or the server's total, or null when it fits. `what`
 * names the request in the message.
 */
export function budgetRefusal(
  state: ServerState,
  session: Session,
  episodes: number,
  bytes: number,
  what: string,
): string | null {
  const { maxEpisodesPerConnection: share, maxEpisodesInFlight: total } = state.options;
  if (state.episodesInFlight + episodes > total)
    return `max_episodes_in_flight is ${total}; ${state.episodesInFlight} are held over all sessions and ${what} needs ${episodes}`;
  if (session.episodesHeld + episodes > share)
    return `max_episodes_per_connection is ${share}; this session holds ${session.episodesHeld} episodes (running rollouts, unacknowledged groups, open env sessions) and ${what} needs ${episodes}`;
  return state.memory.refusal(session.memory, bytes, `${what} (${episodes} episodes)`);
}

/**
 * Resolves once `episodes`, to be charged `bytes`, fit the session's share and the server's
 * total, holding them (true), or when `signal` aborts (false). `held` runs when they are held,
 * before anything else is admitted: it charges the `bytes`.
 */
export function holdWhenRoom(
  state: ServerState,
  session: Session,
  episodes: number,
  bytes: number,
  signal: AbortSignal,
  held: () => void,
): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(false);
  if (fitsBudget(state, session, episodes, bytes)) {
    session.hold(episodes);
    held();
    return Promise.resolve(true);
  }
  let queue = waiting.get(state);
  if (!queue) {
    queue = new WaitQueue<Waiter>();
    waiting.set(state, queue);
  }
  return queue.park({ session, episodes, bytes, held }, signal).then((left) => left === "woken");
}
