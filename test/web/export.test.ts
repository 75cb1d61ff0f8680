// Exports of a batch: a self-contained HTML page and an SVG image strip, from the CLI
// (`rollgym export`) with the same functions the page's Export buttons use.
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { rollgym } from "../helpers/cli.ts";
import { writeEpisodes } from "./fixtures.ts";

let dir: string;
let file: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "rollgym-export-"));
  file = join(dir, "run.jsonl");
  await writeEpisodes(
    file,
    [
      { tag: "SimpleSokoban", groups: 2 },
      { tag: "FrozenLake", groups: 1 },
      { tag: "Bandit", groups: 1 },
    ],
    3,
  );
});

describe("rollgym export", () => {
  it("writes a self-contained HTML page with every episode, its pictures and verdicts", async () => {
    const out = join(dir, "run.html");
    const result = await rollgym(["export", file, "--out", out]);
    expect(result).toMatchObject({ code: 0, stderr: "" });
    expect(JSON.parse(result.stdout)).toMatchObject({ out, format: "html", groups: 4, episodes: 12 });
    const html = readFileSync(out, "utf8");
    expect(html.match(/<summary>Episode #/g)).toHaveLength(12);
    expect(html.match(/<h2>Group \d/g)).toHaveLength(4);
    expect(html).toMatch(/kept|dropped/);
    // Pictures for the grid envs (one tile drawing each, referenced), text for the Bandit.
    expect(html).toContain('<g id="rg-s-box">');
    expect(html).toContain('href="#rg-l-hole"');
    expect(html).toContain("You are playing a bandit game");
    expect(html).not.toMatch(/<script|<link|src=|url\(/);
  });

  it("writes one SVG image strip, a row per episode, to stdout; --group picks groups", async () => {
    const result = await rollgym(["export", file, "--format", "svg", "--group", "0,2"]);
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(/^<svg xmlns="http:\/\/www.w3.org\/2000\/svg"/);
    expect(result.stdout.match(/font-weight="bold">#\d+ · group/g)).toHaveLength(6);
    expect(result.stdout).not.toContain("group 1<");
  });

  it("refuses a missing file, a file that is not an episode file, and an unknown group", async () => {
    const cases: [string[], string][] = [
      [["export", join(dir, "nope.jsonl")], "cannot read"],
      [["export", join(dir, "run.html")], "not a JSON line"],
      [["export", file, "--group", "9"], "no group 9"],
      [["export", file, "--format", "png"], "--format"],
    ];
    for (const [args, message] of cases) {
      const result = await rollgym(args);
      expect(result.code, message).toBe(2);
      expect(result.stdout).toBe("");
      expect(result.stderr).toContain(message);
    }
  });
});
