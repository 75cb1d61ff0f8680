// Token mode through the server: a rollout with `tokens: true` sends each episode's token log as
// typed arrays equal to runBatch's; env hosting in a token session, driven by a trainer that
// samples from the same engine with the same seeds, ends with the same logs; refusals.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import { readI32 } from "../../protocol/codec.ts";
import { ChatPolicy } from "../../src/llm/openai-chat.ts";
import { requestSeed } from "../../src/llm/policy.ts";
import { type MockEngine, startMockEngine } from "../../src/mock-engine/server.ts";
import type { EpisodeRecord } from "../../src/record/episode-record.ts";
import { runBatch } from "../../src/rollout/batch.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { TestClient } from "../helpers/ws-client.ts";

let engine: MockEngine;
let policy: ChatPolicy;
let server: RollgymServer;
let builtin: RollgymServer;
let url: string;
let builtinUrl: string;

beforeAll(async () => {
  engine = await startMockEngine({ model: "mock", seed: 9 });
  policy = new ChatPolicy({ baseURL: engine.url, model: "mock" });
  await policy.preflight();
  server = await buildServer({ policy });
  url = await server.listen(0);
  builtin = await buildServer();
  builtinUrl = await builtin.listen(0);
});
afterAll(async () => {
  await server?.shutdown();
  await builtin?.shutdown();
  await policy?.close();
  await engine?.close();
});

const SEED = 10000;

/** The same episodes played in-process in token mode. */
async function reference(groups: number, groupSize: number): Promise<EpisodeRecord[]> {
  const base = defaultBatchRequest("train", {
    tags: [{ tag: "SimpleSokoban", groups }],
    groupSize,
    seed: SEED,
  });
  const batch = await runBatch(createRegistry(), { ...base, tokens: true }, policy);
  return batch.episodes;
}

describe("token mode over the protocol", () => {
  it("times each token-mode sample in rollgym_inference_request_seconds, as chat requests", async () => {
    const samples = async (): Promise<number> => {
      const text = await (await fetch(`${url}/metrics`)).text();
      return Number(/^rollgym_inference_request_seconds_count\{outcome="ok"\} (\d+)$/m.exec(text)?.[1] ?? 0);
    };
    const before = await samples();
    const client = await TestClient.connect(url);
    client.send({ type: "credit", groups: 100 });
    client.send({
      type: "rollout",
      id: "m",
      tags: [{ tag: "SimpleSokoban", groups: 1 }],
      mode: "train",
      group_size: 2,
      seed: SEED + 1,
      delivery: "stream",
      tokens: true,
    });
    await client.next((f) => f.type === "batch");
    const turns = client
      .of("group")
      .flatMap((f) => f.episodes as EpisodeRecord[])
      .reduce((n, e) => n + e.turns.length, 0);
    client.close();
    expect(turns).toBeGreaterThan(0);
    expect((await samples()) - before).toBe(turns);
  });

  it("a rollout with tokens: true carries each episode's log as typed arrays", async () => {
    const client = await TestClient.connect(url);
    client.send({ type: "credit", groups: 100 });
    client.send({
      type: "rollout",
      id: "t",
      tags: [{ tag: "SimpleSokoban", groups: 2 }],
      mode: "train",
      group_size: 2,
      seed: SEED,
      delivery: "stream",
      tokens: true,
    });
    await client.next((f) => f.type === "batch");
    const expected = await reference(2, 2);
    const groups = client.of("group").sort((a, b) => (a.group as number) - (b.group as number));
    expect(groups).toHaveLength(2);
    for (const frame of groups) {
      const offsets = [...readI32(frame.token_offsets_i32 as Uint8Array)];
      const ids = [...readI32(frame.token_ids_i32 as Uint8Array)];
      const episodes = frame.episodes as (EpisodeRecord & { tokens: { template_drift: number | null } })[];
      episodes.forEach((e, i) => {
        const want = expected[e.env_id].tokens!;
        expect(ids.slice(offsets[i], offsets[i + 1])).toEqual(want.ids);
        expect(e.tokens.template_drift).toBeNull();
      });
      for (const field of ["loss_mask_u8", "logprobs_f32", "token_rewards_f32", "turn_starts_i32"]) {
        expect(frame[field]).toBeInstanceOf(Uint8Array);
      }
    }
    client.close();
  });

  it("env hosting in a token session returns the ids to append; its logs equal a token rollout's", async () => {
    const client = await TestClient.connect(url);
    client.send({
      type: "env_open",
      id: "h",
      tag: "SimpleSokoban",
      groups: 1,
      group_size: 2,
      seed: SEED,
      tokens: true,
    });
    const opened = await client.next((f) => f.type === "env_opened");
    const logs = new Map<number, number[]>();
    for (const e of opened.episodes as { env_id: number; prompt_ids: number[] }[])
      logs.set(e.env_id, [...e.prompt_ids]);
    const base = defaultBatchRequest("train", { seed: SEED });
    let stepped = 0;
    for (let turn = 0; logs.size > 0; turn++) {
      // The trainer's own inference: the same engine, the log as the prompt, rollgym's seeds.
      const responses = await Promise.all(
        [...logs].map(async ([envId, ids]) => {
          const answer = (await (
            await fetch(`${engine.url}/completions`, {
              method: "POST",
              headers: { "content-type": "application/json" },
              body: JSON.stringify({
                model: "mock",
                prompt: ids,
                max_tokens: base.sampling.max_tokens,
                temperature: base.sampling.temperature,
                top_p: base.sampling.top_p,
                top_k: base.sampling.top_k,
                min_p: base.sampling.min_p,
                repetition_penalty: 1,
                presence_penalty: 0,
                frequency_penalty: 0,
                seed: requestSeed(SEED, envId, turn),
                n: 1,
                stop: null,
                logprobs: 0,
                return_token_ids: true,
              }),
            })
          ).json()) as {
            choices: { text: string; token_ids: number[]; logprobs: { token_logprobs: number[] } }[];
          };
          const choice = answer.choices[0];
          ids.push(...choice.token_ids);
          return {
            env_id: envId,
            text: choice.text,
            sampled_ids: choice.token_ids,
            logprobs: choice.logprobs.token_logprobs,
          };
        }),
      );
      client.send({ type: "env_step", id: "h", responses });
      stepped++;
      const reply = await client.next(
        (f) => f.type === "env_stepped" && client.of("env_stepped").length === stepped,
      );
      for (const r of reply.results as { env_id: number; done: boolean; next_ids: number[] | null }[]) {
        if (r.done) {
          expect(r.next_ids).toBeNull();
          logs.delete(r.env_id);
        } else logs.get(r.env_id)!.push(...r.next_ids!);
      }
    }
    client.send({ type: "env_close", id: "h" });
    const closed = await client.next((f) => f.type === "env_closed");
    const expected = await reference(1, 2);
    for (const e of closed.episodes as EpisodeRecord[]) {
      expect(e.tokens!.ids).toEqual(expected[e.env_id].tokens!.ids);
      expect(e.tokens!.loss_mask).toEqual(expected[e.env_id].tokens!.loss_mask);
    }
    client.close();
  });

  /** Asks for a token rollout and a token env session; both are refused: the two error frames. */
  async function refusedTokens(client: TestClient) {
    client.send({
      type: "rollout",
      id: "r",
      tags: [{ tag: "SimpleSokoban", groups: 1 }],
      mode: "train",
      group_size: 2,
      delivery: "batch",
      tokens: true,
    });
    const rollout = await client.next((f) => f.type === "error");
    expect(rollout).toMatchObject({ code: "bad_frame", rollout: "r" });
    client.send({ type: "env_open", id: "e", tag: "SimpleSokoban", groups: 1, group_size: 2, tokens: true });
    const env = await client.next((f) => f.type === "error" && f.id === "e");
    expect(env).toMatchObject({ code: "bad_frame", field: "tokens" });
    return { rollout, env };
  }

  it("refuses tokens: true, naming why, when the engine is used without count routes (count_tokens=usage)", async () => {
    const usage = new ChatPolicy({ baseURL: engine.url, model: "mock", countTokens: "usage" });
    await usage.preflight();
    const counting = await buildServer({ policy: usage });
    try {
      const client = await TestClient.connect(await counting.listen(0));
      const { rollout, env } = await refusedTokens(client);
      expect(rollout.message).toMatch(/token mode needs the engine's \/tokenize.*count_tokens=engine/);
      expect(env.message).toMatch(/token mode needs the engine's \/tokenize/);
      client.close();
    } finally {
      await counting.shutdown();
      await usage.close();
    }
  });

  it("refuses tokens: true without a remote engine, and a token step without sampled ids", async () => {
    const plain = await TestClient.connect(builtinUrl);
    const { rollout } = await refusedTokens(plain);
    expect(rollout.message).toMatch(/tokens: true needs the server to run against a remote engine/);
    plain.close();

    const client = await TestClient.connect(url);
    client.send({ type: "env_open", id: "k", tag: "SimpleSokoban", groups: 1, group_size: 2, tokens: true });
    await client.next((f) => f.type === "env_opened");
    client.send({
      type: "env_step",
      id: "k",
      responses: [{ env_id: 0, text: "x</think><answer>Up</answer>" }],
    });
    const error = await client.next((f) => f.type === "error" && f.id === "k");
    expect(error).toMatchObject({ code: "bad_frame", field: "responses" });
    expect(error.message).toMatch(/sampled_ids/);
    client.close();
  });
});
