// `rollgym show FILE`: an episode file of 8 × 16 episodes printed turn by turn, filtered by
// group, episode, tag and outcome.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { type EpisodeFile, readEpisodeFile } from "../../src/record/episode-file.ts";
import { expectUsageError } from "../helpers/cli.ts";
import { runInProcess } from "./in-process.ts";

const dir = mkdtempSync(join(tmpdir(), "rollgym-show-"));
const path = join(dir, "train.jsonl");
let file: EpisodeFile;

/** The episodes a `show` printed, by their headline. */
function shownEpisodes(stdout: string): number[] {
  return [...stdout.matchAll(/^━━ episode (\d+) /gm)].map((m) => Number(m[1]));
}

describe("rollgym show", () => {
  beforeAll(async () => {
    // RAGEN's default train batch, 8 groups × 16, with noisy and malformed answers for variety.
    const r = await runInProcess([
      "rollout",
      "--noise",
      "0.4",
      "--malformed",
      "0.2",
      "--out",
      path,
      "--json",
    ]);
    expect(r.code, r.stderr).toBe(0);
    file = await readEpisodeFile(path);
    expect(file.episodes).toHaveLength(128);
  });

  it("prints every turn of every episode: board, response, actions and reward", async () => {
    const r = await runInProcess(["show", path]);
    expect(r.code, r.stderr).toBe(0);
    expect(shownEpisodes(r.stdout)).toEqual(file.episodes.map((e) => e.env_id));
    const turns = file.episodes.reduce((n, e) => n + e.turns.length, 0);
    expect(r.stdout.match(/^── turn \d+: /gm)).toHaveLength(turns);
    expect(r.stdout.match(/^actions: .* · reward /gm)).toHaveLength(turns);
    for (const e of file.episodes) {
      for (const t of e.turns) {
        // Boards drawn line by line, not as JSON strings with \n.
        for (const line of t.state.split("\n")) expect(r.stdout).toContain(`  │ ${line}`);
        expect(r.stdout).toContain(`  │ ${t.response.split("\n")[0]}`);
      }
    }
    expect(r.stdout).not.toContain("\\n");
  });

  it("filters by group, episode, tag and outcome", async () => {
    const group = await runInProcess(["show", path, "--group", "3,5"]);
    expect(shownEpisodes(group.stdout)).toEqual(
      file.episodes.filter((e) => e.group_id === 3 || e.group_id === 5).map((e) => e.env_id),
    );
    const one = await runInProcess(["show", path, "--episode", "17"]);
    expect(shownEpisodes(one.stdout)).toEqual([17]);
    for (const outcome of ["solved", "unsolved"] as const) {
      const want = file.episodes.filter((e) => e.success === (outcome === "solved")).map((e) => e.env_id);
      expect(want.length).toBeGreaterThan(0);
      const r = await runInProcess(["show", path, "--outcome", outcome]);
      expect(shownEpisodes(r.stdout)).toEqual(want);
      expect(r.stdout).toContain(`showing ${want.length}`);
    }
    const both = await runInProcess([
      "show",
      path,
      "--outcome",
      "solved,unsolved",
      "--tag",
      "CoordSokoban",
      "--group",
      "0",
    ]);
    expect(shownEpisodes(both.stdout)).toHaveLength(16);
    expect((await runInProcess(["show", path, "--episode", "3", "--raw"])).stdout).toContain(
      "response (raw):",
    );
  });

  it("refuses ids, outcomes and tags the file does not have, and files that are not episode files", async () => {
    expectUsageError(await runInProcess(["show", path, "--episode", "128"]), ["--episode", "128", "0..127"]);
    expectUsageError(await runInProcess(["show", path, "--group", "x"]), ["--group", '"x"']);
    expectUsageError(await runInProcess(["show", path, "--outcome", "won"]), [
      "--outcome",
      "solved, unsolved, failed",
    ]);
    expectUsageError(await runInProcess(["show", path, "--tag", "Bandit"]), ["--tag", "CoordSokoban"]);
    expectUsageError(await runInProcess(["show", join(dir, "missing.jsonl")]), ["missing.jsonl", "ENOENT"]);
    expectUsageError(await runInProcess(["show"]), ["<FILE>"]);
  });
});
