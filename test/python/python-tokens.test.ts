// Token mode on the trainer side: group frames carrying token logs (the wire format of
// PROTOCOL.md), decoded by the Python client, packed with pack_batch and trained on by a tiny
// torch model (PPO-clip loss, backward, a few steps) under Debian's /usr/bin/python3 with
// python3-torch. The script checks the invariants and exits non-zero when one breaks.
import { spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { ROOT } from "../helpers/cli.ts";

const PYTHON = "/usr/bin/python3";

describe("python client: token logs → pack_batch → torch", () => {
  it("a tiny torch model's PPO step on a packed token-mode batch", () => {
    const result = spawnSync(PYTHON, ["test/python/torch_training_check.py"], {
      cwd: ROOT,
      env: { ...process.env, PYTHONPATH: "python", PYTHONDONTWRITEBYTECODE: "1" },
      encoding: "utf8",
      timeout: 120_000,
    });
    const output = `exit ${result.status} ${result.signal ?? ""}\n--- stdout\n${result.stdout}\n--- stderr\n${result.stderr}`;
    expect(result.status, output).toBe(0);
    const summary = JSON.parse(result.stdout.trim().split("\n").at(-1)!) as {
      ok: boolean;
      episodes: number;
      sampled_tokens: number;
      loss_before: number;
      loss_after: number;
    };
    expect(summary.ok).toBe(true);
    expect(summary.episodes).toBe(24);
    expect(summary.sampled_tokens).toBeGreaterThan(50);
    expect(summary.loss_after).toBeLessThan(summary.loss_before);
  }, 150_000);
});
