// protocol/schema.json is generated from the same schemas that validate frames; it must be
// current, so the documented schema is the enforced one.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { protocolJsonSchema } from "../../protocol/schema-json.ts";
import { ROOT } from "../helpers/cli.ts";

describe("protocol/schema.json", () => {
  it("matches the schemas in protocol/messages.ts (regenerate with: node protocol/schema-json.ts > protocol/schema.json)", () => {
    expect(readFileSync(join(ROOT, "protocol", "schema.json"), "utf8")).toBe(protocolJsonSchema());
  });
});
