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

/** A progress line on stderr for long runs, only when stderr is a terminal. */
export class Progress {
  private readonly label: string;
  private readonly total: number;
  private count = 0;
  private lastPrint = 0;
  private readonly enabled: boolean;

  constructor(label: string, total: number) {
    this.label = label;
    this.total = total;
    this.enabled = process.stderr.isTTY === true && total >= 200;
  }

  tick(): void {
    this.count++;
    if (!this.enabled) return;
    const now = Date.now();
    if (now - this.lastPrint < 200 && this.count < this.total) return;
    this.lastPrint = now;
    process.stderr.write(
      `\r${this.label}: ${this.count}/${this.total} (${Math.floor((100 * this.count) / this.total)}%)`,
    );
  }

  done(): void {
    if (this.enabled) process.stderr.write("\n");
  }
}
