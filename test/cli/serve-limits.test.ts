// Every server limit is a configuration key (protocol/settings.ts LIMITS, docs/server.md
// "Limits and fairness"): `rollgym serve key=value` and a config file set them, welcome.limits
// and /v1/web report what they set, the old flags still win over the keys, and a bad value is
// one line naming the key and what it allows.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { expectUsageError, serving } from "../helpers/cli.ts";
import { TestClient } from "../helpers/ws-client.ts";
import { runInProcess } from "./in-process.ts";

const dir = mkdtempSync(join(tmpdir(), "rollgym-limits-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const TRAINER = { type: "hello", protocol: 1, client: "trainer", role: "trainer" };

describe("rollgym serve: limits from configuration keys", () => {
  it("key=value sets limits no flag reaches; welcome.limits and /v1/web report them", async () => {
    const keys = [
      "rollgym.server.max_held_bytes=1000000",
      "rollgym.server.send_pause_bytes=65536",
      "rollgym.server.env_idle_s=12.5",
      "rollgym.server.max_watchers=5",
      "rollgym.server.max_update_s=9",
      "rollgym.server.max_upload_bytes=4096",
      "rollgym.server.max_connections=77",
      "rollgym.limits.max_groups_per_rollout=9",
    ];
    await serving(keys, process.env, async (url) => {
      const trainer = await TestClient.connect(url, { hello: TRAINER });
      expect(trainer.of("welcome")[0].limits).toMatchObject({
        max_held_bytes: 1_000_000,
        // The per-session share is sent as at most the budget, under both its names.
        max_held_bytes_per_connection: 1_000_000,
        max_env_bytes: 1_000_000,
        max_env_bytes_per_connection: 1_000_000,
        send_pause_bytes: 65_536,
        env_idle_s: 12.5,
        max_watchers: 5,
        max_update_s: 9,
        max_connections: 77,
        max_groups_per_rollout: 9,
        // Untouched: the defaults.
        max_frame_bytes: 1 << 20,
        resume_grace_s: 60,
      });
      trainer.close();
      const web = (await (await fetch(`${url}/v1/web`)).json()) as { limits: Record<string, number> };
      expect(web.limits).toMatchObject({ maxUploadBytes: 4096, maxUploads: 16 });
    });
  });

  it("a config file sets them too, old keys included; a flag wins over its key", async () => {
    const file = join(dir, "limits.yaml");
    writeFileSync(
      file,
      [
        "rollgym:",
        "  limits:",
        "    max_episodes_in_flight: 1000",
        "  server:",
        "    max_rollouts_per_connection: 3",
        "    max_send_buffer_bytes: 1048576",
        "    heartbeat_s: 7",
        "    max_connections: 40",
        "    resume_grace_s: 5",
        "",
      ].join("\n"),
    );
    await serving(["--config", file, "--max-connections", "55"], process.env, async (url) => {
      const client = await TestClient.connect(url);
      expect(client.of("welcome")[0].limits).toMatchObject({
        max_episodes_in_flight: 1000,
        max_rollouts_per_connection: 3,
        max_send_buffer_bytes: 1_048_576,
        heartbeat_s: 7,
        max_connections: 55,
        resume_grace_s: 5,
      });
      client.close();
    });
  });

  it("a bad value is one line naming the key and the allowed range", async () => {
    const cases: [string[], string[]][] = [
      [["rollgym.server.max_held_bytes=0"], ["rollgym.server.max_held_bytes", "from 1 to"]],
      [["rollgym.server.env_idle_s=-1"], ["rollgym.server.env_idle_s", "> 0 and <= 86400"]],
      [["rollgym.server.max_connections=2.5"], ["rollgym.server.max_connections", "from 1 to 1000000"]],
      [["rollgym.server.max_update_s=90000"], ["rollgym.server.max_update_s", ">= 1 and <= 86400"]],
    ];
    for (const [args, mentions] of cases)
      expectUsageError(await runInProcess(["serve", "--port", "0", ...args]), mentions);
    const file = join(dir, "bad.yaml");
    writeFileSync(file, "rollgym:\n  server:\n    send_stall_s: nope\n");
    expectUsageError(await runInProcess(["serve", "--port", "0", "--config", file]), [
      "rollgym.server.send_stall_s",
      "bad.yaml",
    ]);
  });
});
