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

export async function runInProcess(argv: readonly string[], stdin = ""): Promise<CliResult> {
  const out = sink();
  const err = sink();
  const code = await run(argv, {
    stdout: out.stream,
    stderr: err.stream,
    stdin: Readable.from(stdin === "" ? [] : [Buffer.from(stdin)]),
  });
  return { code, stdout: out.text(), stderr: err.text() };
}
