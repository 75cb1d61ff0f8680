// Progress on stderr: one redrawn line on a terminal, a plain line every few seconds otherwise
// (logs and CI keep a readable record instead of carriage returns).

export interface ProgressStream {
  write(text: string): unknown;
  isTTY?: boolean;
}

export class Progress {
  private readonly stream: ProgressStream;
  private readonly tty: boolean;
  private lastPlain = 0;
  private drawn = false;
  private readonly plainEveryMs: number;

  constructor(stream: ProgressStream, plainEveryMs = 5000) {
    this.stream = stream;
    this.plainEveryMs = plainEveryMs;
    this.tty = stream.isTTY === true;
  }

  /** `label` with a bar when `total` is known; redrawn in place on a terminal. */
  update(label: string, done: number, total: number | null, detail = ""): void {
    const share = total ? Math.min(1, done / total) : null;
    const bar = share === null ? "" : `[${"#".repeat(Math.round(share * 24)).padEnd(24, ".")}] `;
    const count = total ? `${done}/${total}` : `${done}`;
    const line = `${label} ${bar}${count}${detail ? ` ${detail}` : ""}`;
    if (this.tty) {
      this.stream.write(`\r\x1b[2K${line}`);
      this.drawn = true;
      return;
    }
    const now = Date.now();
    if (now - this.lastPlain < this.plainEveryMs) return;
    this.lastPlain = now;
    this.stream.write(`${line}\n`);
  }

  /** A line that stays (a phase finished, a result). */
  note(text: string): void {
    if (this.tty && this.drawn) this.stream.write("\r\x1b[2K");
    this.drawn = false;
    this.stream.write(`${text}\n`);
  }

  done(): void {
    if (this.tty && this.drawn) this.stream.write("\r\x1b[2K");
    this.drawn = false;
  }
}
