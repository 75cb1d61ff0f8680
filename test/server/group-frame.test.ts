// Versions on group frames (PROTOCOL.md "Versions"): absent until a trainer has used updates,
// even where the records hold them; then the group's range and each token's ordinal.
import { describe, expect, it } from "vitest";
import { decodeFrame, encodeMessage, readI32 } from "../../protocol/codec.ts";
import type { EpisodeRecord, TurnRecord } from "../../src/record/episode-record.ts";
import { TokenLog } from "../../src/rollout/token-log.ts";
import { groupFrame, versionRange } from "../../src/server/group-frame.ts";

function turn(dispatch: number, completion: number): TurnRecord {
  return {
    turn: 1,
    state: "s",
    actions_left: 1,
    warned: false,
    raw_response: "r",
    response: "r",
    parsed: [],
    actions: [],
    reward: 0,
    reward_text: "0",
    format_penalty: false,
    info: {},
    finish_reason: "stop",
    version: { dispatch, completion },
  };
}

function episode(envId: number, turns: TurnRecord[], versions?: number[]): EpisodeRecord {
  const ids = versions?.map((_, i) => i) ?? [];
  return {
    env_id: envId,
    group_id: 0,
    tag: "SimpleSokoban",
    seed: 1,
    turns,
    final_state: "",
    num_actions: 0,
    terminated: false,
    truncated: false,
    success: false,
    reward: 0,
    penalty: 0,
    score: 0,
    metrics: {},
    failure: null,
    end_reason: "done",
    ...(versions
      ? {
          tokens: {
            ids,
            loss_mask: ids.map(() => 1),
            logprobs: ids.map(() => 0),
            rewards: ids.map(() => 0),
            prompt_length: 0,
            turn_starts: [0],
            turn_ends: [ids.length],
            prompt_drift: 0,
            template_drift: null,
            logprobs_missing: 0,
            versions,
          },
        }
      : {}),
  } as EpisodeRecord;
}

describe("group frames and versions", () => {
  const records = [
    episode(0, [turn(1, 1), turn(1, 2)], [-1, 1, 1, -1, 2]),
    episode(1, [turn(2, 3)], [-1, 3]),
  ];

  it("carry no version field before updates are used, whatever the records hold", () => {
    const frame = groupFrame("r", 0, records, null, null);
    const bytes = encodeMessage(frame);
    const decoded = decodeFrame(bytes) as Record<string, unknown>;
    expect(decoded).not.toHaveProperty("min_version");
    expect(decoded).not.toHaveProperty("token_versions_i32");
    const episodes = decoded.episodes as { turns: object[]; tokens: object }[];
    for (const e of episodes) {
      for (const t of e.turns) expect(t).not.toHaveProperty("version");
      expect(e.tokens).not.toHaveProperty("versions");
    }
    // The records themselves are left as they were.
    expect(records[0].turns[0].version).toEqual({ dispatch: 1, completion: 1 });
  });

  it("carry the group's range, the turns' versions and each token's ordinal once they are", () => {
    const frame = groupFrame("r", 0, records, null, null, { versions: true });
    expect(frame).toMatchObject({ min_version: 1, max_version: 3 });
    expect([...readI32(frame.token_versions_i32!)]).toEqual([-1, 1, 1, -1, 2, -1, 3]);
    expect((frame.episodes[1] as { turns: TurnRecord[] }).turns[0].version).toEqual({
      dispatch: 2,
      completion: 3,
    });
  });

  it("count an episode played before any update (no stamps) as ordinal 0 beside stamped ones", () => {
    const { version: _v, ...bare } = turn(0, 0);
    const unstamped = episode(2, [bare as TurnRecord], [-1, 7]);
    delete unstamped.tokens!.versions;
    unstamped.tokens!.loss_mask = [0, 1];
    const frame = groupFrame("r", 0, [records[1], unstamped], null, null, { versions: true });
    expect(frame).toMatchObject({ min_version: 0, max_version: 3 });
    expect([...readI32(frame.token_versions_i32!)]).toEqual([-1, 3, -1, 0]);
    expect((frame.episodes[1] as { turns: TurnRecord[] }).turns[0].version).toEqual({
      dispatch: 0,
      completion: 0,
    });
    // The record itself is left as it was.
    expect(unstamped.turns[0]).not.toHaveProperty("version");
  });

  it("a range from the turns alone, none when nothing is known", () => {
    expect(versionRange([episode(0, [turn(4, 5)])])).toEqual({ min: 4, max: 5 });
    const { version: _v, ...bare } = turn(0, 0);
    expect(versionRange([episode(0, [bare as TurnRecord])])).toBeNull();
  });
});

describe("group frames from token logs", () => {
  /** Two episodes' logs: NaN and negative logprobs, an empty turn, versions on some turns. */
  function logs(withVersions: boolean): TokenLog[] {
    const a = new TokenLog([5, 6, 7]);
    a.sampled([8, 9], [-0.25, Number.NaN], withVersions ? [1, 2] : undefined);
    a.reward(1.5);
    a.inserted([10]);
    a.sampled([], []);
    a.reward(9);
    a.inserted([11]);
    a.sampled([12], [-3.1], withVersions ? [2] : undefined);
    a.reward(-0.1);
    const b = new TokenLog([5]);
    b.sampled([13, 14, 15], [-1e-8, -0.5, -2], withVersions ? [3, 3, 4] : undefined);
    b.reward(0.3);
    return [a, b];
  }

  function framed(read: boolean, withVersions: boolean): Uint8Array {
    const records = logs(withVersions).map((log, i) => {
      const tokens = log.record(withVersions);
      // Reading any array makes the frame use the record's arrays instead of the log's turns.
      if (read) expect(tokens.loss_mask.length).toBe(tokens.ids.length);
      return { ...episode(i, [turn(1, 2)]), tokens };
    });
    return encodeMessage(groupFrame("r", 0, records, null, null, { versions: withVersions }));
  }

  it("write the same bytes from the logs' turns as from the records' arrays, with and without versions", () => {
    for (const withVersions of [false, true]) {
      const direct = framed(false, withVersions);
      expect(direct).toEqual(framed(true, withVersions));
      const decoded = decodeFrame(direct) as Record<string, unknown>;
      expect([...readI32(decoded.token_offsets_i32 as Uint8Array)]).toEqual([0, 8, 12]);
      if (withVersions) {
        expect([...readI32(decoded.token_versions_i32 as Uint8Array)]).toEqual([
          -1, -1, -1, 1, 2, -1, -1, 2, -1, 3, 3, 4,
        ]);
        expect(decoded.min_version).toBe(1);
        expect(decoded.max_version).toBe(4);
      } else expect(decoded).not.toHaveProperty("token_versions_i32");
    }
  });

  it("a record's array given a new value before it was read is the one the frame writes", () => {
    const [log] = logs(false);
    const tokens = log.record();
    tokens.rewards = tokens.ids.map(() => 7);
    const frame = groupFrame("r", 0, [{ ...episode(0, [turn(1, 1)]), tokens }], null, null);
    expect([...new Float32Array((frame.token_rewards_f32 as Uint8Array).slice().buffer)]).toEqual(
      tokens.ids.map(() => 7),
    );
  });

  it("a record keeps its keys in their order, and JSON gives its arrays", () => {
    const [log] = logs(true);
    const tokens = log.record(true);
    expect(Object.keys(tokens).slice(0, 5)).toEqual([
      "ids",
      "loss_mask",
      "logprobs",
      "rewards",
      "turn_starts",
    ]);
    expect(Object.keys(tokens).at(-1)).toBe("versions");
    const json = JSON.parse(JSON.stringify(tokens)) as Record<string, unknown>;
    expect(json.loss_mask).toEqual([0, 0, 0, 1, 1, 0, 0, 1]);
    // The empty turn's reward has no id to sit on.
    expect(json.rewards).toEqual([0, 0, 0, 0, 1.5, 0, 0, -0.1]);
    expect(json.logprobs).toEqual([0, 0, 0, -0.25, null, 0, 0, -3.1]);
  });
});
