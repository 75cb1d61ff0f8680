// docs/configuration.md's key table is generated from the key table that types, defaults and
// validates the configuration, and docs/server.md's limits table from LIMITS; both must be
// current, so the documented keys and limits are the enforced ones.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { LIMITS } from "../../protocol/settings.ts";
import {
  CONFIGURATION_DOC,
  keyTable,
  limitTable,
  SERVER_DOC,
  withKeyTable,
  withLimitTable,
} from "../../src/config/docs.ts";
import { CONFIG_KEYS } from "../../src/config/keys.ts";

describe("docs/configuration.md", () => {
  it("holds the current key table (regenerate with: node src/config/docs.ts --write)", () => {
    const doc = readFileSync(CONFIGURATION_DOC, "utf8");
    expect(withKeyTable(doc)).toBe(doc);
  });

  it("lists every key once, with its default, what is allowed and its request field", () => {
    const table = keyTable();
    for (const key of Object.keys(CONFIG_KEYS)) expect(table).toContain(`| \`${key}\` |`);
    expect(table).toContain(
      '| `actor_rollout_ref.rollout.rollout_filter_top_p_prob_mode` | `"linear"` | one of linear, softmax | `filter.top_p_mode` |',
    );
    expect(table).toContain("| `actor_rollout_ref.rollout.val_kwargs.temperature` | `0.5` |");
  });
});

describe("docs/server.md", () => {
  it("holds the current limits table (regenerate with: node src/config/docs.ts --write)", () => {
    const doc = readFileSync(SERVER_DOC, "utf8");
    expect(withLimitTable(doc)).toBe(doc);
  });

  it("lists every limit once, with its configuration key, which is a key of the configuration", () => {
    const table = limitTable();
    for (const [name, limit] of Object.entries(LIMITS)) {
      const key = limit["x-config"].key;
      expect(table).toContain(`| \`${name}\` | \`${key}\` |`);
      expect(CONFIG_KEYS).toHaveProperty([key]);
    }
    expect(table).toContain(
      "| `max_held_bytes_per_connection` | `rollgym.server.max_held_bytes_per_connection` | 128 MiB |",
    );
  });
});
