// Runs `rollgym …` inside the test process (src/cli/main.ts runs nothing on import), with its
// own streams: fast enough for thousands of generated command lines.
import { Readable, Writable } from "node:stream";
import { run } from "../../src/cli/main.ts";
import type { CliResult } from "../helpers/cli.ts";

function sink(): { stream: Writable; text: () => string } {
  const chunks: Buffer[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      chunks.push(chunk);
      done();
    },
  });
  return { stream, text: () => Buffer.concat(chunks).toString("utf8") };
}

/**
 * Runs `rollgym argv` in this process. With `deadlineMs`, a command still running then fails
 * with what it wrote to stderr so far and the process's active resources, so a hang says
 * where it stood (vitest's own timeout says nothing of it).
 */
export async function runInProcess(
  argv: readonly string[],
  stdin = "",
  deadlineMs?: number,
): Promise<CliResult> {
  const out = sink();
  const err = sink();
  const running = run(argv, {
    stdout: out.stream,
    stderr: err.stream,
    stdin: Readable.from(stdin === "" ? [] : [Buffer.from(stdin)]),
  });
  let timer: NodeJS.Timeout | undefined;
  const overdue = new Promise<never>((_, reject) => {
    if (deadlineMs === undefined) return;
    timer = setTimeout(() => {
      const resources = process.getActiveResourcesInfo().join(", ");
      reject(
        new Error(
          `rollgym ${argv.join(" ")}: still running after ${deadlineMs} ms; stderr so far:\n${err.text()}\nactive resources: ${resources}`,
        ),
      );
    }, deadlineMs);
  });
  try {
    const code = await Promise.race([running, overdue]);
    return { code, stdout: out.text(), stderr: err.text() };
  } finally {
    clearTimeout(timer);
  }
}
