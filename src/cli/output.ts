// Buffered line output for commands that print many JSON lines; reading stdin whole.
import { once } from "node:events";

export class LineWriter {
  private chunks: string[] = [];
  private size = 0;

  async line(value: unknown): Promise<void> {
    const text = `${JSON.stringify(value)}\n`;
    this.chunks.push(text);
    this.size += text.length;
    if (this.size >= 1 << 16) await this.flush();
  }

  async flush(): Promise<void> {
    if (this.chunks.length === 0) return;
    const text = this.chunks.join("");
    this.chunks = [];
    this.size = 0;
    if (!process.stdout.write(text)) await once(process.stdout, "drain");
  }
}

export async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

/** A progress bar on stderr: redrawn on a terminal, a line every few seconds otherwise. */
export class ProgressBar {
  private readonly label: string;
  private readonly total: number;
  private readonly unit: string;
  private done_ = 0;
  private failed = 0;
  private readonly tty = process.stderr.isTTY === true;
  private readonly started = Date.now();
  private last = this.started;

  constructor(label: string, total: number, unit = "episodes") {
    this.label = label;
    this.total = total;
    this.unit = unit;
  }

  tick(failed = false): void {
    this.done_++;
    if (failed) this.failed++;
    const now = Date.now();
    // A terminal gets a live bar (and its final state); a log gets a line every 5 s of long runs.
    const due = this.tty ? now - this.last >= 100 || this.done_ === this.total : now - this.last >= 5000;
    if (!due) return;
    this.last = now;
    const width = 30;
    const filled = Math.round((width * this.done_) / this.total);
    const rate = this.done_ / Math.max((now - this.started) / 1000, 1e-3);
    const text =
      `${this.label} [${"#".repeat(filled)}${"-".repeat(width - filled)}] ${this.done_}/${this.total} ${this.unit}` +
      `${this.failed ? `, ${this.failed} failed` : ""}, ${rate.toFixed(1)}/s`;
    process.stderr.write(this.tty ? `\r${text}` : `${text}\n`);
  }

  done(): void {
    if (this.tty && this.done_ > 0) process.stderr.write("\n");
  }
}
