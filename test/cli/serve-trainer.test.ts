// `rollgym serve`'s trainer options (docs/server.md "Options", "Security"): the trainer token
// from --trainer-token-file or $ROLLGYM_TRAINER_TOKEN reserves the trainer role, --max-update
// bounds an open update and reaches the trainer's welcome, and bad values are usage errors.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { expectUsageError, serving } from "../helpers/cli.ts";
import { TestClient } from "../helpers/ws-client.ts";
import { runInProcess } from "./in-process.ts";

const dir = mkdtempSync(join(tmpdir(), "rollgym-trainer-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const TRAINER = { type: "hello", protocol: 1, client: "trainer", role: "trainer" };

describe("rollgym serve: the trainer's options", () => {
  it("--trainer-token-file reserves the role; --max-update reaches the trainer's welcome", async () => {
    const file = join(dir, "trainer-token");
    writeFileSync(file, "from-a-file-91b\n");
    await serving(["--trainer-token-file", file, "--max-update", "7"], process.env, async (url) => {
      const refused = await TestClient.connect(url, { hello: TRAINER });
      await refused.closed();
      expect(refused.closeCode).toBe(4004);
      const trainer = await TestClient.connect(url, {
        hello: { ...TRAINER, trainer_token: "from-a-file-91b" },
      });
      expect(trainer.of("welcome")[0]).toMatchObject({ limits: { max_update_s: 7 } });
      const other = await TestClient.connect(url);
      expect(other.of("welcome")[0].limits).not.toHaveProperty("max_update_s");
      trainer.close();
      other.close();
    });
  });

  it("$ROLLGYM_TRAINER_TOKEN does the same; without any the role is anyone's and max_update_s is 600", async () => {
    await serving([], { ...process.env, ROLLGYM_TRAINER_TOKEN: "from-the-env" }, async (url) => {
      const wrong = await TestClient.connect(url, { hello: { ...TRAINER, trainer_token: "from-the-file" } });
      await wrong.closed();
      expect(wrong.of("error")[0]).toMatchObject({ code: "not_trainer", field: "trainer_token" });
      const trainer = await TestClient.connect(url, { hello: { ...TRAINER, trainer_token: "from-the-env" } });
      expect(trainer.of("welcome")).toHaveLength(1);
      trainer.close();
    });
    const env = { ...process.env };
    delete env.ROLLGYM_TRAINER_TOKEN;
    await serving([], env, async (url) => {
      const trainer = await TestClient.connect(url, { hello: TRAINER });
      expect(trainer.of("welcome")[0]).toMatchObject({ limits: { max_update_s: 600 } });
      trainer.close();
    });
  });

  it("bad values are one line naming the flag", async () => {
    const long = join(dir, "long-token");
    writeFileSync(long, `${"t".repeat(201)}\n`);
    const empty = join(dir, "empty-token");
    writeFileSync(empty, "\n");
    const cases: [string[], string[]][] = [
      [["--max-update", "0"], ["--max-update"]],
      [["--max-update", "86401"], ["--max-update"]],
      [["--trainer-token", "a", "--trainer-token-file", long], ["--trainer-token and --trainer-token-file"]],
      [
        ["--trainer-token-file", long],
        ["--trainer-token", "201 characters", "at most 200"],
      ],
      [
        ["--trainer-token-file", empty],
        ["--trainer-token-file", "empty"],
      ],
      [
        ["--trainer-token-file", join(dir, "missing")],
        ["--trainer-token-file", "cannot read"],
      ],
    ];
    for (const [args, mentions] of cases)
      expectUsageError(await runInProcess(["serve", "--port", "0", ...args]), mentions);
  });
});
