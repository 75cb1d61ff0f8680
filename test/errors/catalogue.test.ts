// The error catalogue: every code reaches at least one boundary, with values the protocol and
// HTTP define, and each boundary reads its answer from the code, whatever class carries it.
import { STATUS_CODES } from "node:http";
import { describe, expect, it } from "vitest";
import { EnvConfigError } from "../../envs/types.ts";
import { CLOSE_CODES, ERROR_CODES } from "../../protocol/codec.ts";
import { validateServerMessage } from "../../protocol/messages.ts";
import { UsageError } from "../../src/cli/args.ts";
import { codeOf, errorFrame, exitStatus, httpRefusal, wsAnswer } from "../../src/errors/boundary.ts";
import { CATALOGUE, type Code, RollgymError } from "../../src/errors/catalogue.ts";
import { MockEngineUsageError } from "../../src/mock-engine/cli.ts";

describe("error catalogue", () => {
  it("gives every code a boundary, with a frame code, close code and HTTP status that exist", () => {
    const closes = new Set<number>(Object.values(CLOSE_CODES));
    for (const [code, entry] of Object.entries(CATALOGUE)) {
      const boundaries = [entry.frame, entry.close, entry.http, entry.exit].filter((b) => b !== undefined);
      expect(boundaries.length, code).toBeGreaterThan(0);
      if (entry.frame) expect(ERROR_CODES, code).toContain(entry.frame);
      if (entry.close !== undefined) expect(closes.has(entry.close), code).toBe(true);
      if (entry.http !== undefined) expect(STATUS_CODES[entry.http], code).toBeDefined();
      expect(code).toMatch(/^[a-z]+(_[a-z]+)*$/);
    }
  });

  it("reads the code, not the class: the CLI's exit statuses", () => {
    expect(exitStatus(new UsageError("x"))).toBe(2);
    expect(exitStatus(new MockEngineUsageError("x"))).toBe(2);
    // envs/ imports nothing of ours: its error carries the code as a plain string.
    expect(codeOf(new EnvConfigError("seed", "bad"))).toBe("env_config");
    expect(exitStatus(new EnvConfigError("seed", "bad"))).toBe(2);
    expect(exitStatus(new RollgymError("command_failed", { message: "x" }))).toBe(1);
    // A bug is not the input's fault: no status, the CLI throws it with its stack.
    expect(exitStatus(new TypeError("x"))).toBeNull();
    expect(exitStatus(Object.assign(new Error("pipe"), { code: "EPIPE" }))).toBeNull();
  });

  it("answers a WebSocket with a valid error frame, a close, or both", () => {
    const limit = errorFrame(new RollgymError("max_groups_per_rollout", { max: 4, groups: 5 }), {
      rollout: "r",
    });
    expect(limit).toEqual({
      type: "error",
      code: "limit",
      message: "max_groups_per_rollout is 4; this rollout asks for 5 groups",
      rollout: "r",
      field: "tags",
    });
    expect(validateServerMessage(limit).ok).toBe(true);
    // Frames that have always named the field first keep that order (the same bytes).
    const done = errorFrame(new RollgymError("episode_done", { envId: 3 }), { id: "e" });
    expect(Object.keys(done)).toEqual(["type", "code", "message", "field", "id"]);

    const version = wsAnswer(new RollgymError("protocol_version", { client: 9, server: 1 }));
    expect(version.frame?.code).toBe("protocol_version");
    expect(version.close).toEqual({ code: CLOSE_CODES.versionMismatch, reason: "protocol version mismatch" });
    const text = wsAnswer(new RollgymError("text_frame", {}));
    expect(text.frame).toBeNull();
    expect(text.close?.code).toBe(CLOSE_CODES.undecodable);
    // Close reasons fit the 123 bytes a close frame allows.
    const long = wsAnswer(new RollgymError("undecodable_frame", { message: "é".repeat(200) }));
    expect(Buffer.byteLength(long.close?.reason ?? "")).toBeLessThanOrEqual(123);
    // Anything uncoded is `internal`, its message passed on.
    expect(wsAnswer(new Error("boom")).frame).toEqual({ type: "error", code: "internal", message: "boom" });
  });

  it("answers HTTP with the entry's status; an error without one is left to the framework", () => {
    expect(httpRefusal(new RollgymError("bad_request", { message: "m" }, "seed"))).toEqual({
      status: 400,
      body: { error: { code: 400, message: "m", field: "seed" } },
    });
    expect(httpRefusal(new RollgymError("unauthorized", { query: false }))?.status).toBe(401);
    expect(httpRefusal(new RollgymError("usage", { message: "m" }))).toBeNull();
    expect(httpRefusal(new Error("bug"))).toBeNull();
  });

  it("types each code's parameters", () => {
    const code: Code = "unknown_rollout";
    expect(new RollgymError(code, { rollout: "a" }).message).toBe('no rollout "a" in this session');
  });
});
