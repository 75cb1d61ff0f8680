// docs/configuration.md's key table is generated from the key table that types, defaults and
// validates the configuration; it must be current, so the documented keys are the enforced ones.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { CONFIGURATION_DOC, keyTable, withKeyTable } from "../../src/config/docs.ts";
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
