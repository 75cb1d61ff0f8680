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

/** One line on stderr, prefixed like every rollgym message. */
export function say(text: string): void {
  io().stderr.write(`rollgym: ${text}\n`);
}
