// A rollout played in shares (issue 34, PROTOCOL.md "Shards"): `group_range` plays a part of a
// rollout exactly as the whole rollout plays it, and `played_episodes` judges every episode as one
// server judges the batch it played. Bad values are refused naming the field.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { randomPolicy } from "../../src/llm/builtin.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { type Frame, playToVerdict, TestClient, until } from "../helpers/ws-client.ts";

let server: RollgymServer;
let url: string;

beforeAll(async () => {
  // Random moves: scores differ, so the filter has something to rank.
  server = await buildServer({ policy: randomPolicy() });
  url = await server.listen(0, "127.0.0.1");
});
afterAll(async () => {
  await server.shutdown();
});

// 5 groups of two tags; top_k keeps int(0.6 × 5) = 3 of them.
const ROLLOUT = {
  type: "rollout",
  mode: "train",
  tags: [
    { tag: "SimpleSokoban", groups: 2 },
    { tag: "FrozenLake", groups: 3 },
  ],
  group_size: 3,
  seed: 11,
  max_turn: 3,
  filter: { strategy: "top_k", value: 0.6 },
};

/** The group frames of rollout `id` received so far, by group id. */
function groupsOf(client: TestClient, id: string): Frame[] {
  return client.received
    .filter((f) => f.type === "group" && f.rollout === id)
    .sort((a, b) => (a.group as number) - (b.group as number));
}

/** An episode record as `played_episodes` takes it: the fields the verdict reads. */
function asPlayed(episode: Frame): Record<string, unknown> {
  const { env_id, group_id, tag, seed, score, success, failure, end_reason, metrics } = episode;
  const turns = (episode.turns as Record<string, unknown>[]).map(({ context_dropped, ambiguous_split }) => ({
    ...(context_dropped === undefined ? {} : { context_dropped }),
    ...(ambiguous_split === undefined ? {} : { ambiguous_split }),
  }));
  return { env_id, group_id, tag, seed, score, success, failure, end_reason, metrics, turns };
}

/**
 * Plays an endless stream until `windows` window frames arrived, acknowledging its groups, then
 * cancels it: its group and window frames.
 */
async function playWindows(
  client: TestClient,
  stream: Frame,
  windows: number,
): Promise<{ groups: Frame[]; windows: Frame[] }> {
  const id = stream.id;
  const ack = () => {
    const f = client.received.at(-1)!;
    if (f.type === "group" && f.rollout === id) client.send({ type: "ack", rollout: id, groups: [f.group] });
  };
  client.ws.on("message", ack);
  client.send({ type: "credit", groups: 1000 });
  client.send(stream);
  try {
    await until(
      () => client.received.filter((f) => f.type === "window" && f.rollout === id).length >= windows,
    );
    client.send({ type: "cancel", rollout: id });
    await client.next((f) => f.type === "batch" && f.rollout === id);
    client.send({ type: "ack", rollout: id, groups: [], batch: true });
  } finally {
    client.ws.off("message", ack);
  }
  const frames = client.received.filter((f) => f.rollout === id);
  return {
    groups: groupsOf(client, id as string).filter((g) => (g.window as number) < windows),
    windows: frames.filter((f) => f.type === "window" && (f.window as number) < windows),
  };
}

/** What a group frame says but its rollout id and per-session sequence number. */
function content(frame: Frame): Frame {
  const { rollout: _rollout, seq: _seq, ...rest } = frame;
  return rest;
}

describe("a rollout in shares", () => {
  it("group_range plays those groups as the whole rollout does; played_episodes gives its batch frame", async () => {
    const client = await TestClient.connect(url);
    const whole = await playToVerdict(client, { ...ROLLOUT, id: "whole", delivery: "stream" });
    const wholeGroups = groupsOf(client, "whole");
    expect(whole.dropped).toHaveLength(2);

    const shares: Frame[] = [];
    for (const [i, [first, count]] of [
      [0, 2],
      [2, 3],
    ].entries()) {
      const id = `share${i}`;
      const verdict = await playToVerdict(client, {
        ...ROLLOUT,
        id,
        delivery: "stream",
        group_range: { first, count },
      });
      // A share's own verdict keeps all of its groups: the filter is the whole rollout's.
      expect(verdict).toMatchObject({
        kept: Array.from({ length: count }, (_, k) => first + k),
        dropped: [],
      });
      // Its progress counts its own episodes.
      const progress = client.received.filter((f) => f.type === "progress" && f.rollout === id).at(-1);
      expect(progress).toMatchObject({ episodes_done: count * 3, episodes_total: count * 3 });
      shares.push(...groupsOf(client, id));
    }
    expect(shares.map(content)).toEqual(wholeGroups.map(content));

    const episodes = shares.flatMap((g) => (g.episodes as Frame[]).map(asPlayed));
    const judged = await playToVerdict(client, {
      ...ROLLOUT,
      id: "judged",
      delivery: "stream",
      played_episodes: episodes,
    });
    const { group_scores, ...verdict } = judged;
    expect(verdict).toEqual({ ...whole, rollout: "judged" });
    expect(group_scores).toHaveLength(5);
    // Nothing was played for it.
    expect(groupsOf(client, "judged")).toEqual([]);
    client.close();
  });

  it("an endless stream in shares: each window's share as the whole stream plays it, judged as its window", async () => {
    // Windows of 4 groups; top_k keeps int(0.5 × 4) = 2 of each.
    const stream = {
      ...ROLLOUT,
      tags: [
        { tag: "SimpleSokoban", groups: 2 },
        { tag: "FrozenLake", groups: 2 },
      ],
      filter: { strategy: "top_k", value: 0.5 },
      delivery: "stream",
      endless: true,
    };
    const client = await TestClient.connect(url);
    const whole = await playWindows(client, { ...stream, id: "endless" }, 2);
    const shares = [
      await playWindows(client, { ...stream, id: "half0", group_range: { first: 0, count: 2 } }, 2),
      await playWindows(client, { ...stream, id: "half1", group_range: { first: 2, count: 2 } }, 2),
    ];
    for (const w of [0, 1]) {
      const inWindow = (frames: Frame[]) => frames.filter((g) => g.window === w);
      const merged = shares
        .flatMap((share) => inWindow(share.groups))
        .sort((a, b) => (a.group as number) - (b.group as number));
      expect(merged.map(content)).toEqual(inWindow(whole.groups).map(content));
      // The window's episodes as a rollout of its own: seeds from seed + w × 4, ids from 0.
      const first = w * 4;
      const episodes = merged.flatMap((g) =>
        (g.episodes as Frame[]).map((e) => ({
          ...asPlayed(e),
          env_id: (e.env_id as number) - first * 3,
          group_id: (e.group_id as number) - first,
        })),
      );
      const judged = await playToVerdict(client, {
        ...ROLLOUT,
        ...stream,
        endless: undefined,
        id: `window${w}`,
        seed: (ROLLOUT.seed as number) + first,
        played_episodes: episodes,
      });
      const window = whole.windows.find((f) => f.window === w)!;
      const shift = (ids: unknown) => (ids as number[]).map((g) => g + first);
      expect({
        kept: shift(judged.kept),
        dropped: shift(judged.dropped),
        failed_groups: shift(judged.failed_groups),
        metrics: judged.metrics,
        episodes: judged.episodes,
        failed: judged.failed,
      }).toEqual({
        kept: window.kept,
        dropped: window.dropped,
        failed_groups: window.failed_groups,
        metrics: window.metrics,
        episodes: window.episodes,
        failed: window.failed,
      });
      expect(window.dropped).toHaveLength(2);
    }
    client.close();
  });

  it("refuses bad shares and bad episodes naming the field", async () => {
    const client = await TestClient.connect(url);
    const refusal = async (id: string, extra: Record<string, unknown>): Promise<Frame> => {
      client.send({ ...ROLLOUT, id, delivery: "stream", ...extra });
      return client.next((f) => f.type === "error" && f.rollout === id);
    };
    expect(await refusal("batch", { delivery: "batch", group_range: { first: 0, count: 1 } })).toMatchObject({
      code: "bad_frame",
      field: "group_range",
    });
    const past = await refusal("past", { group_range: { first: 3, count: 3 } });
    expect(past).toMatchObject({ code: "bad_frame", field: "group_range.count" });
    expect(past.message).toContain("allowed: first + count <= 5");
    expect(await refusal("beyond", { group_range: { first: 5, count: 1 } })).toMatchObject({
      field: "group_range.first",
    });
    expect(await refusal("zero", { group_range: { first: 0, count: 0 } })).toMatchObject({
      code: "bad_frame",
      field: "group_range.count",
    });

    const played = await playToVerdict(client, { ...ROLLOUT, id: "played", delivery: "stream" });
    expect(played.type).toBe("batch");
    const episodes = groupsOf(client, "played").flatMap((g) => (g.episodes as Frame[]).map(asPlayed));
    const few = await refusal("few", { played_episodes: episodes.slice(1) });
    expect(few).toMatchObject({ code: "bad_frame", field: "played_episodes" });
    expect(few.message).toContain("got 14 episodes; the request's 5 groups × group_size 3 make 15");
    const swapped = [episodes[1], episodes[0], ...episodes.slice(2)];
    expect(await refusal("order", { played_episodes: swapped })).toMatchObject({
      field: "played_episodes[0].env_id",
    });
    const badScore = episodes.map((e, i) => (i === 4 ? { ...e, score: "high" } : e));
    const scored = await refusal("score", { played_episodes: badScore });
    expect(scored).toMatchObject({ field: "played_episodes[4].score" });
    expect(scored.message).toContain("played_episodes[4].score");
    const extra = await refusal("extra", {
      played_episodes: episodes.map((e) => ({ ...e, turns_text: "x" })),
    });
    expect(extra).toMatchObject({ code: "bad_frame", field: "played_episodes[0].turns_text" });
    const otherSeed = await refusal("seed", { seed: 12, played_episodes: episodes });
    expect(otherSeed).toMatchObject({ field: "played_episodes[0].seed" });
    expect(
      await refusal("both", { group_range: { first: 0, count: 1 }, played_episodes: episodes }),
    ).toMatchObject({ field: "played_episodes" });
    client.close();
  });
});
