import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 60_000,
    // Hooks start engines, servers and Chromium, seconds each on a loaded machine.
    hookTimeout: 60_000,
    pool: "forks",
  },
});
