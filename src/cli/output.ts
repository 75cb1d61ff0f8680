// Buffered line output for commands that print many JSON lines (or, with --pretty, readable
// blocks); reading stdin whole; the progress bar.
import { once } from "node:events";
import type { FlagSpec } from "./args.ts";
import { io } from "./io.ts";

export const PRETTY_FLAG: Record<string, FlagSpec> = {
  pretty: {
    kind: "switch",
    help: "print readable blocks (boards drawn, not JSON strings) instead of JSON lines",
  },
};

export class LineWriter {
  private readonly pretty: boolean;
  private chunks: string[] = [];
  private size = 0;
  private count = 0;

  constructor(pretty = false) {
    this.pretty = pretty;
  }

  async line(value: unknown): Promise<void> {
    const text = this.pretty
      ? `${this.count > 0 ? "\n" : ""}${prettyLines(value).join("\n")}\n`
      : `${JSON.stringify(value)}\n`;
    this.count++;
    this.chunks.push(text);
    this.size += text.length;
    if (this.size >= 1 << 16) await this.flush();
  }

  async flush(): Promise<void> {
    if (this.chunks.length === 0) return;
    const text = this.chunks.join("");
    this.chunks = [];
    this.size = 0;
    const { stdout } = io();
    if (!stdout.write(text)) await once(stdout, "drain");
  }
}

function isScalar(value: unknown): boolean {
  return value === null || typeof value !== "object";
}

/** A multi-line text as indented lines under a bar ("  │ …"), its final newline dropped. */
export function blockLines(text: string, indent = ""): string[] {
  return text
    .replace(/\n$/, "")
    .split("\n")
    .map((line) => `${indent}  │ ${line}`);
}

function scalarText(value: unknown): string {
  return typeof value === "string" ? value : JSON.stringify(value);
}

/**
 * A JSON value as indented `key: value` lines; text with line breaks (boards, prompts) is printed
 * as a block below its key instead of a string full of `\n`.
 */
function prettyLines(value: unknown, indent = ""): string[] {
  if (isScalar(value)) return [`${indent}${scalarText(value)}`];
  const entries: [string, unknown][] = Array.isArray(value)
    ? value.map((v, i) => [`[${i}]`, v])
    : Object.entries(value as Record<string, unknown>);
  const lines: string[] = [];
  for (const [key, v] of entries) {
    if (typeof v === "string" && v.includes("\n")) {
      lines.push(`${indent}${key}:`, ...blockLines(v, indent));
    } else if (isScalar(v)) {
      lines.push(`${indent}${key}: ${scalarText(v)}`);
    } else if (Array.isArray(v) && v.every(isScalar)) {
      lines.push(`${indent}${key}: ${v.length ? v.map(scalarText).join(", ") : "(none)"}`);
    } else {
      lines.push(`${indent}${key}:`, ...prettyLines(v, `${indent}  `));
    }
  }
  return lines;
}

export async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of io().stdin) chunks.push(typeof chunk === "string" ? Buffer.from(chunk) : chunk);
  return Buffer.concat(chunks).toString("utf8");
}

/** A progress bar on stderr: redrawn on a terminal, a line every few seconds otherwise. */
export class ProgressBar {
  private readonly label: string;
  private readonly total: number;
  private readonly unit: string;
  private done_ = 0;
  private failed = 0;
  private readonly stderr = io().stderr;
  private readonly tty = this.stderr.isTTY === true;
  private readonly started = Date.now();
  private last = this.started;
  /** The count the last drawn line showed. */
  private shown = -1;
  private detail: () => string | null = () => null;
  private timer: NodeJS.Timeout | null = null;

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
    if (due) this.draw(now);
  }

  /**
   * Also redraws on a timer (every second on a terminal, every 5 s in a log) while `detail`
   * says something, so a wait on the engine shows instead of a frozen bar.
   */
  watch(detail: () => string | null): void {
    this.detail = detail;
    this.timer = setInterval(
      () => {
        const now = detail();
        if (now !== null) this.draw(Date.now(), now);
      },
      this.tty ? 1000 : 5000,
    );
    this.timer.unref();
  }

  private draw(now: number, detail = this.detail()): void {
    this.last = now;
    this.shown = this.done_;
    const width = 30;
    const filled = Math.round((width * this.done_) / Math.max(this.total, 1));
    const rate = this.done_ / Math.max((now - this.started) / 1000, 1e-3);
    const text =
      `${this.label} [${"#".repeat(filled)}${"-".repeat(width - filled)}] ${this.done_}/${this.total} ${this.unit}` +
      `${this.failed ? `, ${this.failed} failed` : ""}, ${rate.toFixed(1)}/s${detail ? `; ${detail}` : ""}`;
    this.stderr.write(this.tty ? `\r\x1b[2K${text}` : `${text}\n`);
  }

  /** Ends the bar with the final count (also in a log, where the last periodic line may be old). */
  done(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    this.detail = () => null;
    if (this.done_ > 0 && this.shown !== this.done_) this.draw(Date.now());
    if (this.tty && this.done_ > 0) this.stderr.write("\n");
  }
}
