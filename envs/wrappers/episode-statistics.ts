// Gymnasium's RecordEpisodeStatistics, read instead of recorded: the return (rewards summed in
// step order) and the length (steps) of the episode since its reset, for whoever reports them
// (the web page's play, the OpenEnv server's state). The step results are left as they are.
import type { AsyncEnv, JsonValue, StepResult } from "../types.ts";
import { Wrapper } from "./wrapper.ts";

export class EpisodeStatistics<E extends AsyncEnv = AsyncEnv> extends Wrapper<E> {
  private total = 0;
  private steps = 0;

  /** The rewards of the episode's steps, summed in order (0 before any step). */
  get episodeReturn(): number {
    return this.total;
  }

  /** Steps since the reset. */
  get episodeLength(): number {
    return this.steps;
  }

  protected override afterReset(): void {
    this.total = 0;
    this.steps = 0;
  }

  protected override afterStep(result: StepResult): StepResult {
    this.total += result.reward;
    this.steps++;
    return result;
  }

  protected override save(): JsonValue {
    return { env: super.save(), episode_return: this.total, episode_length: this.steps };
  }

  protected override load(saved: JsonValue): void {
    const s = saved as { env: JsonValue; episode_return: number; episode_length: number };
    super.load(s.env);
    this.total = s.episode_return;
    this.steps = s.episode_length;
  }
}
