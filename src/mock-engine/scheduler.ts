// The engine's decode loop in virtual time, so that 10,000 requests in flight cost the mock a
// few heap operations per request rather than a timer per token.
//
// A job waits out its prefill (TTFT), puts out its first token, then one token per per-token
// time. Every decoding job shares one per-token time, set by how many jobs are in the engine
// (latency.ts's knee rule), so a single "token clock" V (tokens a nominal-speed job has made
// since time 0) describes them all: a job that starts decoding at V0 with speed k has made
// 1 + k·(V − V0) tokens. Jobs wait in two min-heaps, prefill by end time and decode by the V
// at which they finish, and one timer is armed for the next event. Streaming jobs are also
// woken every `streamTickMs` to pass on the tokens they made.

import { type LatencyModel, perTokenMs } from "./latency.ts";
import { MinHeap } from "./min-heap.ts";

/** What the scheduler needs from the latency model. */
export type DecodeTiming = Pick<LatencyModel, "tpotMs" | "batchKnee" | "slowdownPerRequest">;

export interface DecodeJobSpec {
  /** Time before the first token, ms. */
  prefillMs: number;
  /** Decode steps: the first comes at the end of prefill, each further one a per-token time later. */
  steps: number;
  /** Decode speed relative to the shared per-token time (latency jitter). Default 1. */
  speed?: number;
  /** Tokens each step adds to the decoded-token count (choices of an n > 1 request). Default 1. */
  weight?: number;
  /** Woken about every `streamTickMs` while steps come out (streaming), and when done. */
  onProgress?: () => void;
  /** Called once, when the last step is out (not after remove). */
  onDone?: () => void;
}

/** Where a job is; read `produced` for the steps it has made so far. */
export interface DecodeJob {
  readonly steps: number;
  /** Steps made so far (as of the scheduler's last advance). */
  readonly produced: number;
  readonly done: boolean;
}

class Job implements DecodeJob {
  readonly steps: number;
  readonly speed: number;
  readonly weight: number;
  readonly onProgress: (() => void) | undefined;
  readonly onDone: (() => void) | undefined;
  phase: "prefill" | "decode" | "done" | "removed" = "prefill";
  /** Scheduler time at which prefill ends. */
  readyAt = 0;
  /** Token clock when decoding started, and when the last step is out. */
  vStart = 0;
  vDone = 0;
  /** Steps last reported to onProgress. */
  reported = 0;
  #scheduler: DecodeScheduler;

  constructor(spec: DecodeJobSpec, scheduler: DecodeScheduler) {
    this.steps = spec.steps;
    this.speed = spec.speed ?? 1;
    this.weight = spec.weight ?? 1;
    this.onProgress = spec.onProgress;
    this.onDone = spec.onDone;
    this.#scheduler = scheduler;
  }

  get done(): boolean {
    return this.phase === "done";
  }

  get produced(): number {
    if (this.phase === "done") return this.steps;
    if (this.phase !== "decode") return 0;
    const made = 1 + Math.floor((this.#scheduler.tokenClock - this.vStart) * this.speed + 1e-9);
    return Math.min(this.steps, made);
  }
}

/** Jobs of one phase by a key; jobs that have left the phase are dropped lazily when they reach the top. */
class JobHeap {
  readonly #heap: MinHeap<Job>;
  readonly #phase: Job["phase"];

  constructor(key: (job: Job) => number, phase: Job["phase"]) {
    this.#heap = new MinHeap(key);
    this.#phase = phase;
  }

  push(job: Job): void {
    this.#heap.push(job);
  }

  /** The live job with the smallest key, or undefined. */
  peek(): Job | undefined {
    let top = this.#heap.peek();
    while (top !== undefined && top.phase !== this.#phase) {
      this.#heap.pop();
      top = this.#heap.peek();
    }
    return top;
  }

  pop(): Job | undefined {
    const top = this.peek();
    if (top !== undefined) this.#heap.pop();
    return top;
  }

  clear(): void {
    this.#heap.clear();
  }
}

export interface DecodeSchedulerOptions {
  /** Milliseconds, monotonic. Default performance.now. */
  now?: () => number;
  /** false: no timers; the owner calls advance() (tests drive the clock by hand). Default true. */
  timers?: boolean;
  /** How often streaming jobs are woken while they decode. Default 10 ms. */
  streamTickMs?: number;
}

export class DecodeScheduler {
  readonly #timing: DecodeTiming;
  readonly #now: () => number;
  readonly #timers: boolean;
  readonly #streamTickMs: number;
  /** Scheduler time: real time minus time spent frozen. */
  #time = 0;
  #lastReal: number;
  #frozen = false;
  #clock = 0;
  #jobs = 0;
  /** Σ speed × weight over decoding jobs: how fast the decoded-token count grows per clock unit. */
  #decodeRate = 0;
  #decodedTokens = 0;
  readonly #prefill = new JobHeap((j) => j.readyAt, "prefill");
  readonly #decode = new JobHeap((j) => j.vDone, "decode");
  readonly #streaming = new Set<Job>();
  #timer: NodeJS.Timeout | null = null;
  /** Real time the armed timer fires at. */
  #timerAt = Infinity;

  constructor(timing: DecodeTiming, options: DecodeSchedulerOptions = {}) {
    this.#timing = timing;
    this.#now = options.now ?? (() => performance.now());
    this.#timers = options.timers ?? true;
    this.#streamTickMs = options.streamTickMs ?? 10;
    this.#lastReal = this.#now();
  }

  /** Jobs in the engine (prefilling or decoding): the batch size the per-token time follows. */
  get running(): number {
    return this.#jobs;
  }

  /** The token clock (see the file comment). */
  get tokenClock(): number {
    return this.#clock;
  }

  /** The per-token time right now, ms. */
  get perTokenMs(): number {
    return perTokenMs(this.#timing, this.#jobs);
  }

  /**
   * Tokens decoded so far, including the fractional progress of running jobs (steps × weight
   * of finished jobs, plus what removed jobs made before they left).
   */
  decodedTokens(): number {
    this.advance();
    return this.#decodedTokens;
  }

  add(spec: DecodeJobSpec): DecodeJob {
    if (!Number.isInteger(spec.steps) || spec.steps < 0)
      throw new RangeError(`steps must be an integer ≥ 0, got ${spec.steps}`);
    if (spec.speed !== undefined && !(spec.speed > 0))
      throw new RangeError(`speed must be > 0, got ${spec.speed}`);
    this.advance();
    const job = new Job(spec, this);
    this.#jobs++;
    job.readyAt = this.#time + Math.max(0, spec.prefillMs);
    if (job.onProgress) this.#streaming.add(job);
    // No prefill: the first token is out at once, as the engine's first step would put it.
    if (spec.prefillMs <= 0 && !this.#frozen) this.#startDecode(job);
    else this.#prefill.push(job);
    this.#arm();
    return job;
  }

  /** Takes a job out (its client left, or /pause aborted it); returns the steps it had made. */
  remove(handle: DecodeJob): number {
    const job = handle as Job;
    if (job.phase === "done" || job.phase === "removed") return job.produced;
    this.advance();
    const made = job.produced;
    if (job.phase === "decode") this.#decodeRate -= job.speed * job.weight;
    job.phase = "removed";
    this.#leave(job);
    this.#arm();
    return made;
  }

  /** Stops time for every job (a "keep" pause) until thaw(). */
  freeze(): void {
    this.advance();
    this.#frozen = true;
    this.#arm();
  }

  thaw(): void {
    if (!this.#frozen) return;
    this.#lastReal = this.#now();
    this.#frozen = false;
    // Jobs added while frozen with no prefill start now.
    this.advance();
    this.#arm();
  }

  /** Ends every job without callbacks and disarms the timer (engine shutdown). */
  close(): void {
    this.#prefill.clear();
    this.#decode.clear();
    this.#streaming.clear();
    this.#jobs = 0;
    this.#decodeRate = 0;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    this.#timerAt = Infinity;
  }

  /** Brings every job up to the current time: prefills end, steps come out, jobs finish. */
  advance(): void {
    const real = this.#now();
    if (this.#frozen) {
      this.#lastReal = real;
      return;
    }
    const target = this.#time + Math.max(0, real - this.#lastReal);
    this.#lastReal = real;
    for (;;) {
      const tpot = this.perTokenMs;
      const nextPrefill = this.#prefill.peek();
      const nextDecode = this.#decode.peek();
      const prefillAt = nextPrefill ? nextPrefill.readyAt : Infinity;
      const decodeAt = nextDecode ? this.#time + (nextDecode.vDone - this.#clock) * tpot : Infinity;
      const next = Math.min(prefillAt, decodeAt);
      if (next > target) break;
      this.#run(Math.max(0, next - this.#time), tpot);
      this.#time = Math.max(this.#time, next);
      if (prefillAt <= decodeAt) this.#startDecode(this.#prefill.pop()!);
      else this.#finish(this.#decode.pop()!);
    }
    this.#run(target - this.#time, this.perTokenMs);
    this.#time = target;
  }

  /** Wakes the streaming jobs that made steps since they were last woken. */
  #notifyStreams(): void {
    for (const job of this.#streaming) {
      if (job.phase === "decode" && job.produced > job.reported) {
        job.reported = job.produced;
        job.onProgress!();
      }
    }
  }

  /** Lets `dt` ms of decoding pass at per-token time `tpot`. */
  #run(dt: number, tpot: number): void {
    if (dt <= 0 || tpot <= 0) return;
    const ticks = dt / tpot;
    this.#clock += ticks;
    this.#decodedTokens += ticks * this.#decodeRate;
  }

  #startDecode(job: Job): void {
    if (job.steps === 0) {
      this.#finish(job);
      return;
    }
    this.#decodedTokens += job.weight; // the first token
    job.phase = "decode";
    job.vStart = this.#clock;
    job.vDone = this.#clock + (job.steps - 1) / job.speed;
    if (job.steps === 1 || this.#timing.tpotMs <= 0) {
      // Nothing left to wait for: a zero per-token time decodes the rest at once.
      this.#decodedTokens += (job.steps - 1) * job.weight;
      this.#finish(job);
      return;
    }
    this.#decodeRate += job.speed * job.weight;
    this.#decode.push(job);
  }

  #finish(job: Job): void {
    if (job.phase === "decode" && job.steps > 1 && this.#timing.tpotMs > 0) {
      this.#decodeRate -= job.speed * job.weight;
      // Float drift: the job's share of the count is exactly steps × weight.
      this.#decodedTokens += (job.vDone - this.#clock) * job.speed * job.weight;
    }
    job.phase = "done";
    this.#leave(job);
    if (job.onProgress && job.steps > job.reported) {
      job.reported = job.steps;
      job.onProgress();
    }
    job.onDone?.();
  }

  #leave(job: Job): void {
    this.#jobs--;
    this.#streaming.delete(job);
    if (this.#jobs === 0) this.#decodeRate = 0;
  }

  /** Arms one timer for the next event (or the next streaming tick). */
  #arm(): void {
    if (!this.#timers) return;
    const real = this.#now();
    let at = Infinity;
    if (!this.#frozen) {
      const p = this.#prefill.peek();
      if (p) at = Math.min(at, real + (p.readyAt - this.#time));
      const d = this.#decode.peek();
      if (d) at = Math.min(at, real + (d.vDone - this.#clock) * this.perTokenMs);
      if (this.#streaming.size > 0 && d) at = Math.min(at, real + this.#streamTickMs);
    }
    // A later event than the armed timer needs nothing: an early wake-up just re-arms.
    if (at === Infinity || at >= this.#timerAt - 0.5) {
      if (at === Infinity && this.#timer) {
        clearTimeout(this.#timer);
        this.#timer = null;
        this.#timerAt = Infinity;
      }
      return;
    }
    if (this.#timer) clearTimeout(this.#timer);
    this.#timerAt = at;
    this.#timer = setTimeout(
      () => {
        this.#timer = null;
        this.#timerAt = Infinity;
        this.advance();
        this.#notifyStreams();
        this.#arm();
      },
      Math.max(0, at - real),
    );
    this.#timer.unref();
  }
}
