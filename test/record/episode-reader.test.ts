// The one episode-file reader: real files (plain, token mode, interrupted) read back whole;
// any field given a value of the wrong type is refused with the line and the field named.
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { readEpisodeFile } from "../../src/record/episode-file.ts";
import {
  checkEpisodeText,
  EpisodeFileError,
  fileGroups,
  parseEpisodeText,
} from "../../src/record/episode-reader.ts";
import { writeEpisodes, writeInterruptedEpisodes } from "../web/fixtures.ts";

const dir = mkdtempSync(join(tmpdir(), "rollgym-reader-"));
let lines: Record<string, unknown>[];
let text: string;

beforeAll(async () => {
  const path = join(dir, "run.jsonl");
  await writeEpisodes(
    path,
    [
      { tag: "SimpleSokoban", groups: 1 },
      { tag: "Bandit", groups: 1 },
    ],
    2,
  );
  text = readFileSync(path, "utf8");
  lines = text
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));
});

/** Every leaf of `value` (scalars, empty lists and objects) as a path of keys. */
function leaves(value: unknown, at: (string | number)[] = []): (string | number)[][] {
  if (typeof value !== "object" || value === null) return [at];
  const entries = Object.entries(value);
  if (entries.length === 0) return [at];
  return entries.flatMap(([k, v]) => leaves(v, [...at, Array.isArray(value) ? Number(k) : k]));
}

function replaced(line: Record<string, unknown>, path: (string | number)[], value: unknown) {
  const copy = structuredClone(line);
  let target: Record<string | number, unknown> = copy;
  for (const key of path.slice(0, -1)) target = target[key] as Record<string | number, unknown>;
  target[path[path.length - 1]] = value;
  return copy;
}

/** How the reader names a path: turns[0].reward. */
const fieldName = (type: unknown, path: (string | number)[]) =>
  `${type}.${path.map((k) => (typeof k === "number" ? `[${k}]` : k)).join(".")}`.replaceAll(".[", "[");

describe("the episode-file reader", () => {
  it("reads a file the rollout wrote, from disk and from text, to the same records", async () => {
    const fromDisk = await readEpisodeFile(join(dir, "run.jsonl"));
    expect(parseEpisodeText(text)).toEqual(fromDisk);
    expect(fromDisk.episodes).toHaveLength(4);
    expect(checkEpisodeText(text)).toEqual({ episodes: 4 });
  });

  it("refuses every field of every line given a value of the wrong type, naming line and field", () => {
    let checked = 0;
    lines.forEach((line, index) => {
      const { type, ...rest } = line;
      for (const path of leaves(rest)) {
        // Settings are free-form (what the rollout ran with); the reader passes them on. The
        // format and version get their own message ("not a rollgym episode file").
        if (type === "header" && ["settings", "format", "version"].includes(String(path[0]))) continue;
        const bad = [...lines];
        bad[index] = replaced(line, path, { "<img src=x onerror=alert(1)>": "<script>" });
        const field = fieldName(type, path);
        let error: unknown = null;
        try {
          parseEpisodeText(bad.map((l) => JSON.stringify(l)).join("\n"));
        } catch (e) {
          error = e;
        }
        expect(error, field).toBeInstanceOf(EpisodeFileError);
        const { message, field: named } = error as EpisodeFileError;
        // An empty table (metrics {}) is named down to the bad entry's key.
        expect(named?.startsWith(field), `${message} (want ${field})`).toBe(true);
        expect(message.startsWith(`line ${index + 1}: ${named}: got `), message).toBe(true);
        checked++;
      }
    });
    // Every turn field, token counts and metrics included, of four episodes.
    expect(checked).toBeGreaterThan(100);
  });

  it("names the value and what is allowed", () => {
    const episode = lines.findIndex((l) => l.type === "episode");
    const bad = [...lines];
    bad[episode] = replaced(lines[episode], ["turns", 0, "reward"], "1e9");
    expect(() => parseEpisodeText(bad.map((l) => JSON.stringify(l)).join("\n"), "run.jsonl")).toThrow(
      `run.jsonl:${episode + 1}: episode.turns[0].reward: got "1e9", expected a number`,
    );
  });

  it("refuses duplicate ids, a second header and lines after the summary", () => {
    const json = lines.map((l) => JSON.stringify(l));
    const episode = json.findIndex((l) => l.includes('"type":"episode"'));
    const cases: [string[], string][] = [
      [[...json.slice(0, episode + 1), json[episode], ...json.slice(episode + 1)], "appears twice"],
      [[json[0], json[0], ...json.slice(1)], "a second header"],
      [[...json, json[episode]], "after the summary"],
    ];
    for (const [file, message] of cases) expect(() => parseEpisodeText(file.join("\n"))).toThrow(message);
  });

  it("an interrupted file's unfinished groups are partial groups with the episodes that finished", async () => {
    const path = join(dir, "interrupted.jsonl");
    // Four groups of three; seven episodes finished: groups 0 and 1 whole, group 2 has one.
    await writeInterruptedEpisodes(path, [{ tag: "Bandit", groups: 4 }], 3, 7);
    const groups = fileGroups(await readEpisodeFile(path));
    expect(groups.map((g) => [g.group_id, g.partial, g.episodes.length])).toEqual([
      [0, false, 3],
      [1, false, 3],
      [2, true, 1],
    ]);
    expect(groups[2]).toMatchObject({ score: null, kept: false, failed: false, tag: "Bandit" });
  });

  it("reads a line ending in CRLF (a file saved on Windows) like one ending in LF", () => {
    expect(parseEpisodeText(text.replaceAll("\n", "\r\n"))).toEqual(parseEpisodeText(text));
  });
});
