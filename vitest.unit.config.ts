// `npm run test:unit`: the fast subset a contributor runs with only Node and npm (no llama.cpp,
// torch, Chromium or Debian's Python): environments, protocol, configuration, rollouts, episode
// files, the error catalogue and the server over real sockets with the built-in policy or the
// mock engine. Left to `npm test` (the full gate): tests that need those tools, that start CLI
// processes, and the server's long abuse runs.
import { configDefaults, defineConfig } from "vitest/config";
import base from "./vitest.config.ts";

export default defineConfig({
  ...base,
  test: {
    ...base.test,
    include: [
      "test/envs/**/*.test.ts",
      "test/protocol/**/*.test.ts",
      "test/config/**/*.test.ts",
      "test/rollout/**/*.test.ts",
      "test/record/**/*.test.ts",
      "test/server/**/*.test.ts",
      // The error catalogue, and checks over the whole tree kept at the top (the layering test).
      "test/errors/**/*.test.ts",
      "test/concurrency/**/*.test.ts",
      "test/*.test.ts",
    ],
    exclude: [
      ...configDefaults.exclude,
      // Each spawns `rollgym serve` processes, or runs for half a minute or more.
      "test/server/robustness.test.ts",
      "test/server/shutdown.test.ts",
      "test/server/multi-client-fuzz.test.ts",
      "test/server/backpressure.test.ts",
      "test/server/entry-fuzz.test.ts",
      "test/server/async-acceptance.test.ts",
      "test/server/strict-staleness.test.ts",
      "test/server/update-failures.test.ts",
      "test/server/keepalive-attack.test.ts",
    ],
  },
});
