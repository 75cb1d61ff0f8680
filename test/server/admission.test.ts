// Rollout admission in one place: each check refuses with its own catalogue code, in order,
// and a refused rollout holds nothing.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RolloutRequest } from "../../protocol/messages.ts";
import { codeOf } from "../../src/errors/boundary.ts";
import { admitEnvSession, admitRollout } from "../../src/server/admission.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { openSession } from "../../src/server/budget.ts";
import { EPISODE_BYTES, REMOTE_SESSION_BYTES } from "../../src/server/memory-costs.ts";
import type { Session } from "../../src/server/session.ts";
import { remoteRegistry } from "../helpers/openenv-remote.ts";
import { TestClient } from "../helpers/ws-client.ts";

const frame = (extra: Partial<RolloutRequest> = {}): RolloutRequest => ({
  type: "rollout",
  id: "r",
  tags: [{ tag: "Bandit", groups: 2 }],
  mode: "train",
  group_size: 2,
  delivery: "batch",
  ...extra,
});

describe("rollout admission", () => {
  let server: RollgymServer;
  beforeAll(async () => {
    server = await buildServer({ maxGroupsPerRollout: 8, maxEpisodesPerConnection: 30, maxUnackedGroups: 1 });
  });
  afterAll(async () => {
    await server.shutdown();
  });

  const refusal = (session: Session, request: RolloutRequest): string | null => {
    try {
      admitRollout(server.state, session, request);
      return null;
    } catch (error) {
      return codeOf(error);
    }
  };

  it("refuses each way with its own code, and admits a playable rollout", () => {
    const session = openSession(server.state);
    expect(refusal(session, frame({ tags: [{ tag: "Nope", groups: 1 }] }))).toBe("unknown_tag");
    expect(refusal(session, frame({ tags: [{ tag: "Bandit", groups: 9 }] }))).toBe("max_groups_per_rollout");
    expect(refusal(session, frame({ seed: 2 ** 32 - 1 }))).toBe("seed_range");
    expect(refusal(session, frame({ group_size: 16 }))).toBe("episode_budget");
    expect(refusal(session, frame({ group_size: 1, filter: { strategy: "top_p", value: 0.5 } }))).toBe(
      "unplayable",
    );
    expect(refusal(session, frame({ tokens: true }))).toBe("tokens_need_engine");
    expect(refusal(session, frame({ strict_staleness: true }))).toBe("needs_stream");
    const stream = { delivery: "stream", strict_staleness: true } as const;
    expect(refusal(session, frame(stream))).toBe("strict_needs_staleness");
    expect(refusal(session, frame({ ...stream, max_staleness: 1 }))).toBeNull();
    expect(refusal(session, frame({ strict_staleness: false }))).toBeNull();
    expect(refusal(session, frame())).toBeNull();
    // Nothing is held until the admitted rollout starts.
    expect(session.episodesHeld).toBe(0);
  });

  it("checks the session before the request: a taken id wins over a bad tag", () => {
    const session = openSession(server.state);
    session.enqueueGroup("r", 0, { type: "group" } as never, 0);
    expect(refusal(session, frame({ tags: [{ tag: "Nope", groups: 1 }] }))).toBe("rollout_id_taken");
    // Unacknowledged groups at max_unacked_groups: no new rollout, whatever its id.
    expect(refusal(session, frame({ id: "other" }))).toBe("max_unacked_groups");
  });

  it("admits an env session the same way, naming its own fields", () => {
    const session = openSession(server.state);
    const open = { type: "env_open" as const, id: "e", tag: "Bandit", groups: 1, group_size: 2 };
    const refused = (hosted: Map<string, unknown>, extra: object) => {
      try {
        admitEnvSession(server.state, session, hosted, { ...open, ...extra });
        return null;
      } catch (error) {
        return { code: codeOf(error), field: (error as { field?: string }).field };
      }
    };
    expect(refused(new Map([["e", null]]), {})).toEqual({ code: "env_id_taken", field: undefined });
    expect(refused(new Map(), { tag: "Nope" })).toEqual({ code: "unknown_tag", field: "tag" });
    // The rollout's `tags` is an env session's `groups`.
    expect(refused(new Map(), { groups: 9 })).toEqual({ code: "max_groups_per_rollout", field: "groups" });
    expect(refused(new Map(), { tokens: true })).toEqual({ code: "tokens_need_engine", field: "tokens" });
    expect(refused(new Map(), {})).toBeNull();
  });

  it("refuses every rollout while the server shuts down", () => {
    server.state.closing = true;
    try {
      expect(refusal(openSession(server.state), frame())).toBe("shutting_down");
    } finally {
      server.state.closing = false;
    }
  });

  it("names the rollout or env session in every refusal, env_open's unknown tag too", async () => {
    const url = await server.listen(0);
    const client = await TestClient.connect(url);
    client.send({ ...frame({ id: "bad", tags: [{ tag: "Nope", groups: 1 }] }) });
    const rollout = await client.next((f) => f.type === "error");
    expect(rollout).toMatchObject({ code: "unknown_tag", rollout: "bad", field: "tags" });
    client.send({ type: "env_open", id: "e", tag: "Nope", groups: 1, group_size: 1 });
    const env = await client.next((f) => f.type === "error" && f !== rollout);
    // PROTOCOL.md: errors carry the env session's id whenever the frame named one.
    expect(env).toMatchObject({ code: "unknown_tag", id: "e", field: "tag" });
    client.ws.close();
  });
});

describe("the memory budget at admission", () => {
  it("checks the bytes episodes will be charged: a remote env's episode holds its client session too", async () => {
    const registry = await remoteRegistry("Remote", "CoordSokoban", { url: "http://127.0.0.1:9" });
    // Room for 4 local episodes, not for 4 remote ones (each also holds REMOTE_SESSION_BYTES).
    const server = await buildServer({ registry, maxHeldBytes: 4 * EPISODE_BYTES + REMOTE_SESSION_BYTES });
    try {
      const session = openSession(server.state);
      const open = (tag: string) => {
        try {
          admitEnvSession(server.state, session, new Map(), {
            type: "env_open",
            id: "e",
            tag,
            groups: 1,
            group_size: 4,
          });
          return null;
        } catch (error) {
          return codeOf(error);
        }
      };
      expect(open("CoordSokoban")).toBeNull();
      expect(open("Remote")).toBe("episode_budget");
      const stream = (tag: string) => {
        try {
          admitRollout(
            server.state,
            session,
            frame({ tags: [{ tag, groups: 2 }], group_size: 4, delivery: "stream" }),
          );
          return null;
        } catch (error) {
          return codeOf(error);
        }
      };
      expect(stream("CoordSokoban")).toBeNull();
      expect(stream("Remote")).toBe("episode_budget");
    } finally {
      await server.shutdown();
    }
  });
});
