// The context length prompts are fitted to, kept current: the configured one or the smallest a
// replica reported, whichever is smaller. A replica's length is read at preflight and again
// whenever it can have changed (a restart with another --max-model-len): by the probe that
// brings a replica back after an outage, and after an engine refuses a prompt for length.
import { EngineError } from "./http.ts";

export class ContextLimit {
  private readonly configured: number | null;
  /** Per replica URL, as last reported. */
  private readonly lengths = new Map<string, number>();

  /** The limit in force (read on every request; changes only in note()). */
  private current: number | null;

  constructor(configured: number | "auto") {
    this.configured = configured === "auto" ? null : configured;
    this.current = this.configured;
  }

  /** The limit in force; null when neither the config nor any replica gives one. */
  get value(): number | null {
    return this.current;
  }

  /** Records what a replica reported; an answer without a length changes nothing. */
  note(url: string, length: number | null): void {
    if (length === null) return;
    this.lengths.set(url, length);
    const engine = Math.min(...this.lengths.values());
    this.current = this.configured === null ? engine : Math.min(this.configured, engine);
  }
}

/** An engine's 400 for a prompt plus max_tokens past its context length (vLLM's wordings, llama.cpp's). */
export function isLengthRefusal(error: unknown): boolean {
  return (
    error instanceof EngineError &&
    error.status === 400 &&
    /maximum context length|max_model_len|maximum model length|context size|context length/i.test(
      error.message,
    )
  );
}
