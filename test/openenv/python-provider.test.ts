// rollgym_envs (python/): Python envs served as OpenEnv environments by a pool of worker
// processes. Its unittest suite (test/openenv/test_provider.py) under Debian's /usr/bin/python3:
// remote episodes equal the env in process seed for seed, bad input gets OpenEnv's codes, a slow
// env delays only its own worker, a dead worker ends each of its sessions with a reason and is
// replaced (or leaves the pool, which /health shows), an env's traceback is logged, no worker
// outlives the provider (SIGTERM, SIGINT, SIGHUP, SIGKILL), capacity, routes.
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { expect, it } from "vitest";
import { ROOT } from "../helpers/cli.ts";

it("the Python environment provider's suite passes", { timeout: 240_000 }, async () => {
  const run = promisify(execFile);
  const { stderr } = await run("/usr/bin/python3", ["-m", "unittest", "-v", "test_provider"], {
    cwd: join(ROOT, "test/openenv"),
    env: {
      ...process.env,
      PYTHONPATH: [join(ROOT, "python"), join(ROOT, "python/examples"), "."].join(":"),
      PYTHONDONTWRITEBYTECODE: "1",
    },
    timeout: 230_000,
  }).catch((error: { stdout?: string; stderr?: string }) => {
    throw new Error(`python3 -m unittest test_provider failed\n${error.stdout ?? ""}\n${error.stderr ?? ""}`);
  });
  expect(stderr).toMatch(/Ran 18 tests/);
  expect(stderr).toMatch(/\nOK\s*$/);
});
