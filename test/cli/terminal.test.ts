// Model output and engine text reach the terminal without their escape sequences (issue 19.8):
// `rollgym show` of a file whose responses carry ESC/OSC sequences prints none of them.
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { printable } from "../../src/cli/io.ts";
import { rollgym } from "../helpers/cli.ts";
import { writeEpisodes } from "../web/fixtures.ts";

const HOSTILE = "\u001b]0;owned\u0007\u001b[2J\u001b]52;c;Y3VybCBldmlsIHwgc2g=\u0007\r\u009b31mred\u0008";

describe("text for the terminal", () => {
  it("makes ESC visible and replaces other control characters but newline and tab", () => {
    expect(printable(HOSTILE)).toBe(
      "␛]0;owned\ufffd␛[2J␛]52;c;Y3VybCBldmlsIHwgc2g=\ufffd\ufffd\ufffd31mred\ufffd",
    );
    expect(printable("a\tb\nc ünïcode")).toBe("a\tb\nc ünïcode");
  });

  it("rollgym show prints no escape sequence from a file's responses", async () => {
    const dir = mkdtempSync(join(tmpdir(), "rollgym-terminal-"));
    const path = join(dir, "run.jsonl");
    await writeEpisodes(path, [{ tag: "SimpleSokoban", groups: 1 }], 2);
    const lines = readFileSync(path, "utf8")
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l));
    for (const line of lines)
      if (line.type === "episode")
        for (const turn of line.turns) turn.raw_response = `${HOSTILE}${turn.raw_response}`;
    writeFileSync(path, `${lines.map((l) => JSON.stringify(l)).join("\n")}\n`);
    const result = await rollgym(["show", path, "--raw"]);
    expect(result.code).toBe(0);
    expect(result.stdout).toContain("␛]0;owned");
    // biome-ignore lint/suspicious/noControlCharactersInRegex: looking for control characters
    expect(result.stdout).not.toMatch(/[\u001b\u0007\u0008\r\u009b]/);
  });
});
