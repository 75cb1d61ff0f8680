// Issue #20, "no lost work, no wrong picture": what a new user still hit, re-run as written.
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { expectUsageError } from "../helpers/cli.ts";
import { runInProcess } from "./in-process.ts";

const dir = mkdtempSync(join(tmpdir(), "rollgym-no-lost-work-"));
const SMALL = ["rollout", "--tag", "Bandit", "--groups", "2", "--group-size", "2", "--json"];

describe.concurrent("no lost work", () => {
  it("rollout --out refuses to replace a file that has content, unless --force", async () => {
    const path = join(dir, "earlier-run.jsonl");
    writeFileSync(path, "hours of engine time\n");
    expectUsageError(await runInProcess([...SMALL, "--out", path]), ["--out", "already exists", "--force"]);
    expect(readFileSync(path, "utf8")).toBe("hours of engine time\n");

    const forced = await runInProcess([...SMALL, "--out", path, "--force"]);
    expect(forced.code, forced.stderr).toBe(0);
    expect(readFileSync(path, "utf8")).toMatch(/^\{"type":"header"/);
  });

  it("rollout --out writes an empty file it finds (mktemp) without --force", async () => {
    const path = join(dir, "made-by-mktemp.jsonl");
    writeFileSync(path, "");
    const r = await runInProcess([...SMALL, "--out", path]);
    expect(r.code, r.stderr).toBe(0);
    expect(readFileSync(path, "utf8")).toMatch(/"type":"summary"/);
  });
});
