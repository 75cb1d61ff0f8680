// The streams a command reads and writes. `rollgym` uses the process's; tests run commands in
// process with their own (AsyncLocalStorage keeps concurrent runs apart).
import { AsyncLocalStorage } from "node:async_hooks";

export interface CliStreams {
  stdout: NodeJS.WritableStream & { isTTY?: boolean; columns?: number };
  stderr: NodeJS.WritableStream & { isTTY?: boolean };
  stdin: NodeJS.ReadableStream & { isTTY?: boolean; setRawMode?: (raw: boolean) => unknown };
}

const current = new AsyncLocalStorage<CliStreams>();

export function io(): CliStreams {
  return current.getStore() ?? { stdout: process.stdout, stderr: process.stderr, stdin: process.stdin };
}

export function withStreams<T>(streams: CliStreams, run: () => Promise<T>): Promise<T> {
  return current.run(streams, run);
}

/** One line on stderr, prefixed like every rollgym message (made printable: it may quote a model or an engine). */
export function say(text: string): void {
  io().stderr.write(`rollgym: ${printable(text)}\n`);
}

/**
 * Text from a model, an engine or a file made safe to write to a terminal: ESC becomes a visible
 * ␛ (so no escape sequence, OSC included, reaches the terminal: no colours, titles, hyperlinks
 * or clipboard writes), and the other control characters but newline and tab (carriage return,
 * backspace, the C1 controls, 0x9b among them) become �.
 */
export function printable(text: string): string {
  return text.replace(CONTROL, (ch) => (ch === "\u001b" ? "\u241b" : "\ufffd"));
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point
const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g;
