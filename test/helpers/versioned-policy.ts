// A built-in policy with weight updates, as the WeightUpdates contract (src/llm/versions.ts)
// describes them: begin() holds every new turn, end() releases them under the new version. Each
// turn takes a few milliseconds so that updates find turns in flight. It records what it was
// asked, so tests check the server's side of the bracket against it.
import type { Version } from "../../protocol/messages.ts";
import { oraclePolicy } from "../../src/llm/builtin.ts";
import type { Policy, PolicyRequest, PolicyResponse } from "../../src/llm/policy.ts";
import {
  type EnginesPaused,
  type EnginesResumed,
  INITIAL_VERSION,
  type PauseMode,
  type WeightUpdates,
} from "../../src/llm/versions.ts";

export class VersionedPolicy implements Policy {
  readonly name = "versioned-oracle";
  private readonly inner = oraclePolicy();
  current: Version = INITIAL_VERSION;
  updating = false;
  private held: (() => void)[] = [];
  inFlight = 0;
  /** Episodes whose first turn was asked for while an update was open (the server's gate admits none). */
  episodesStartedDuringUpdate = 0;
  readonly begun: (PauseMode | undefined)[] = [];
  readonly ended: Version[] = [];
  /** begin() throws this once, when set. */
  failNextBegin: Error | null = null;
  private readonly turnMs: number;

  constructor(turnMs = 2) {
    this.turnMs = turnMs;
  }

  updates(): WeightUpdates {
    const policy = this;
    return {
      get current() {
        return policy.current;
      },
      get updating() {
        return policy.updating;
      },
      begin: (mode) => policy.begin(mode),
      end: (version) => policy.end(version),
    };
  }

  async generate(request: PolicyRequest): Promise<PolicyResponse> {
    if (this.updating && request.episode?.turn === 0) this.episodesStartedDuringUpdate++;
    while (this.updating) await new Promise<void>((resolve) => this.held.push(resolve));
    const dispatch = this.current.ordinal;
    this.inFlight++;
    try {
      await new Promise((resolve) => setTimeout(resolve, this.turnMs));
      const response = await this.inner.generate(request);
      return { ...response, versions: { dispatch, completion: this.current.ordinal } };
    } finally {
      this.inFlight--;
    }
  }

  private async begin(mode: PauseMode | undefined): Promise<EnginesPaused> {
    if (this.failNextBegin) {
      const error = this.failNextBegin;
      this.failNextBegin = null;
      throw error;
    }
    this.updating = true;
    this.begun.push(mode);
    return { paused: 1, aborted: 0, out_of_routing: [], in_flight: this.inFlight, refused: [] };
  }

  private async end(version: Version): Promise<EnginesResumed> {
    this.current = { ...version };
    this.ended.push({ ...version });
    this.updating = false;
    for (const wake of this.held.splice(0)) wake();
    return { failed_to_resume: [] };
  }
}
