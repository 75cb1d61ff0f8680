// The error catalogue: every code reaches at least one boundary, with values the protocol and
// HTTP define, and each boundary reads its answer from the code, whatever class carries it.
import { STATUS_CODES } from "node:http";
import { describe, expect, it } from "vitest";
import { EnvConfigError } from "../../envs/types.ts";
import { CLOSE_CODES, ERROR_CODES } from "../../protocol/codec.ts";
import { validateServerMessage } from "../../protocol/messages.ts";
import { UsageError } from "../../src/cli/args.ts";
import { ConfigError } from "../../src/config/schema.ts";
import {
  codeOf,
  errorFrame,
  exitStatus,
  httpRefusal,
  inContext,
  isRefusal,
  wsAnswer,
} from "../../src/errors/boundary.ts";
import { CATALOGUE, type Code, RollgymError } from "../../src/errors/catalogue.ts";
import { EngineError } from "../../src/llm/http.ts";
import { PolicyError } from "../../src/llm/policy.ts";
import { PoolClosedError } from "../../src/llm/replicas.ts";
import { UpdateStateError } from "../../src/llm/version-book.ts";
import { MockEngineUsageError } from "../../src/mock-engine/cli.ts";
import { MissingTokenizerPackageError } from "../../src/mock-engine/qwen3-tokenizer.ts";
import { EpisodeFileError } from "../../src/record/episode-reader.ts";
import { OpenEnvFailure } from "../../src/remote-envs/openenv-session.ts";
import { FilterInputError } from "../../src/rollout/filter.ts";

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

  it("gives the errors of the layers below a code: a mistake in the input exits 2, failed work 1", () => {
    const statuses: [unknown, Code, number][] = [
      [new ConfigError("rollgym.seed", "bad"), "config", 2],
      [new EpisodeFileError("f.jsonl", 3, "bad"), "episode_file", 2],
      [new FilterInputError("scores", "bad"), "filter_input", 2],
      [new MissingTokenizerPackageError(), "tokenizer_missing", 2],
      [new PolicyError("model m is not served", false, "model_not_served"), "model_not_served", 2],
      [new PolicyError("cannot reach u", false, "engine_unreachable"), "engine_unreachable", 1],
      [new PolicyError("gave up"), "policy_failed", 1],
      [new EngineError("503", 503), "engine_failed", 1],
      [new PoolClosedError(), "replica_pool_closed", 1],
      [new UpdateStateError("no update is open"), "update_state", 1],
      // remote-envs imports nothing of ours either: a string code.
      [new OpenEnvFailure("openenv_timeout", "no answer"), "openenv_failed", 1],
    ];
    for (const [error, code, status] of statuses) {
      expect(codeOf(error), code).toBe(code);
      expect(exitStatus(error), code).toBe(status);
    }
    // Their messages are the ones they always had.
    expect(new FilterInputError("scores", "bad").message).toBe("scores: bad");
    expect(new OpenEnvFailure("openenv_timeout", "no answer").message).toBe(
      CATALOGUE.openenv_failed.message({ reason: "openenv_timeout", detail: "no answer" }),
    );
  });

  it("tells refusals of the input from work that failed below, and bugs", () => {
    expect(isRefusal(new RollgymError("bad_responses", { message: "m" }))).toBe(true);
    expect(isRefusal(new EnvConfigError("seed", "bad"))).toBe(true);
    expect(isRefusal(new EngineError("503", 503))).toBe(false);
    expect(isRefusal(new OpenEnvFailure("openenv_closed", "gone"))).toBe(false);
    expect(isRefusal(new TypeError("x"))).toBe(false);
  });

  it("puts what an error is about before its message, keeping its code", () => {
    const config = inContext(new ConfigError("rollgym.seed", "bad"), "config", "--seed") as Error;
    expect(config.message).toBe("--seed: bad");
    expect(exitStatus(config)).toBe(2);
    // Another code, or no code, passes as it is.
    expect((inContext(new UsageError("u"), "config", "--seed") as Error).message).toBe("u");
    expect((inContext(new TypeError("t"), "config", "--seed") as Error).message).toBe("t");
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
