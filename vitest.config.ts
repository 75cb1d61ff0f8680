import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 60_000,
    // Hooks start engines, servers and Chromium, seconds each on a loaded machine.
    hookTimeout: 60_000,
    pool: "forks",
    // expect.poll gives up after 1 s by default: too short for a page on a loaded 2-core machine
    // (the Watch flow's 4 groups missed it while the package test built beside it). A bound, not
    // a timing assertion: a poll that passes still passes at once.
    expect: { poll: { timeout: 20_000 } },
  },
});
