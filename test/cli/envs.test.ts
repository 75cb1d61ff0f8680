// `rollgym envs …` and `rollgym parse`, run through npx as users run them.

import { describe, expect, it } from "vitest";
import { expectUsageError, jsonLines, rollgym } from "../helpers/cli.ts";
import { runInProcess } from "./in-process.ts";

describe.concurrent("rollgym envs", () => {
  it("list prints one JSON line per RAGEN tag", async () => {
    const r = await rollgym(["envs", "list"]);
    expect(r.code).toBe(0);
    const lines = jsonLines(r.stdout);
    expect(lines.map((l) => l.tag)).toEqual([
      "SimpleSokoban",
      "LargerSokoban",
      "SokobanDifferentGridVocab",
      "CoordSokoban",
      "FrozenLake",
      "CoordFrozenLake",
      "Bandit",
      "BanditTest",
    ]);
    for (const l of lines) expect(Object.keys(l)).toEqual(["tag", "env_type", "config"]);
    expect(lines[1].config).toMatchObject({ dim_room: [8, 8], num_boxes: 2, search_depth: 10 });
  });

  it("sample reproduces RAGEN's reference rooms and solution lengths", async () => {
    const r = await rollgym(["envs", "sample", "SimpleSokoban", "--seeds", "10000..10002", "--solve"]);
    expect(r.code).toBe(0);
    const lines = jsonLines(r.stdout);
    expect(lines.map((l) => (l.observation as string).split("\n").join("/"))).toEqual([
      "######/#O####/#__###/#X_###/#_P_##/######",
      "######/#____#/#_OX_#/#_#P_#/######/######",
      "######/######/#P####/#X__##/#O__##/######",
    ]);
    expect(lines.map((l) => l.solution)).toEqual([["Left", "Up", "Up"], ["Right", "Up", "Left"], ["Down"]]);
    expect(lines.map((l) => l.seed)).toEqual([10000, 10001, 10002]);
    const one = jsonLines(
      (await rollgym(["envs", "sample", "SimpleSokoban", "--seeds", "123", "--solve"])).stdout,
    );
    expect(one).toEqual([
      {
        tag: "SimpleSokoban",
        seed: 123,
        observation: "######\n######\n#O####\n#XP###\n#__###\n######",
        solution: ["Down", "Left", "Up"],
      },
    ]);
  });

  it("sample renders the coord formats and FrozenLake seed 123 as RAGEN", async () => {
    const coord = jsonLines(
      (await rollgym(["envs", "sample", "CoordSokoban", "--seeds", "10000"])).stdout,
    )[0];
    expect(coord.observation).toBe(
      "Coordinates: \nBoard size: 6 rows x 6 cols (zero-indexed).\nTargets: (1, 1)\nBoxes: (3, 1)\nPlayer: (4, 2)\n" +
        "Grid Map: \n######\n#O####\n#__###\n#X_###\n#_P_##\n######",
    );
    const lake = jsonLines(
      (await rollgym(["envs", "sample", "CoordFrozenLake", "--seeds", "123", "--solve"])).stdout,
    )[0];
    expect(lake.observation).toBe(
      "Coordinates: \nBoard size: 4 rows x 4 cols (zero-indexed).\nStart: (1, 3)\nGoal: (2, 0)\nPlayer: (1, 3)\n" +
        "Holes: (1, 2)\nGrid Map: \n____\n__OP\nG___\n____",
    );
    expect(lake.solution).toEqual(["Down", "Left", "Left", "Left"]);
    expect(lake.success_probability).toBeGreaterThan(0.8);
    expect(lake.success_probability).toBeLessThan(0.9);
    const bandit = jsonLines(
      (await rollgym(["envs", "sample", "Bandit", "--seeds", "123", "--solve"])).stdout,
    )[0];
    expect(bandit.solution).toEqual(["Artist"]);
  });

  it("play steps from reset and stops after the action that ends the episode", async () => {
    const r = await rollgym([
      "envs",
      "play",
      "SimpleSokoban",
      "--seed",
      "10000",
      "--actions",
      "left,UP,Up,Down",
    ]);
    expect(r.code).toBe(0);
    const lines = jsonLines(r.stdout);
    expect(lines).toHaveLength(3);
    expect(lines.map((l) => l.action)).toEqual(["Left", "Up", "Up"]);
    expect(lines.map((l) => l.reward)).toEqual([-0.1, -0.1, 10.9]);
    expect(lines.map((l) => l.done)).toEqual([false, false, true]);
    expect(lines[2]).toMatchObject({ success: true, effective: true });
    for (const l of lines)
      expect(Object.keys(l)).toEqual(["action", "reward", "done", "success", "effective", "observation"]);
  });

  it("prompt reproduces Appendix A for CoordSokoban seed 10000", async () => {
    const r = await rollgym(["envs", "prompt", "CoordSokoban", "--seed", "10000"]);
    expect(r.code).toBe(0);
    const { messages } = JSON.parse(r.stdout) as { messages: { role: string; content: string }[] };
    expect(messages.map((m) => m.role)).toEqual(["system", "user"]);
    expect(messages[0].content).toBe(
      "You're a helpful assistant. You are solving the Sokoban puzzle. You are the player and you need to push all boxes to targets.\n" +
        "You are provided with a symbol grid and the zero-indexed coordinates of the player, each box, and each target. \n" +
        "Coordinates range from the top-left corner (0, 0) to the bottom-right corner (5, 5). \n" +
        "When you are exactly next to a box, you can push it by moving in the same direction. \n" +
        "You cannot push a box through a wall, and you cannot pull a box.\n" +
        "The answer should be a sequence of actions, like <answer>Right || Right || Up</answer>.\n\n" +
        "The meaning of each symbol in the state is:\n" +
        "#: wall, _: empty, O: target, √: box on target, X: box, P: player, S: player on target\n" +
        "Your available actions are:\nUp, Down, Left, Right\n" +
        'You can make up to 10 actions, separated by the action separator " || "\n',
    );
    expect(messages[1].content).toBe(
      "\nTurn 1:\nState:\nCoordinates: \nBoard size: 6 rows x 6 cols (zero-indexed).\nTargets: (1, 1)\nBoxes: (3, 1)\n" +
        "Player: (4, 2)\nGrid Map: \n######\n#O####\n#__###\n#X_###\n#_P_##\n######\n" +
        "You have 10 actions left. Always output: <think> [Your thoughts] </think> <answer> [your answer] </answer> " +
        "with no extra text. Strictly follow this format. Max response length: 120 words (tokens).\n",
    );
    const noThink = JSON.parse(
      (await rollgym(["envs", "prompt", "CoordSokoban", "--seed", "10000", "--no-think"])).stdout,
    );
    expect(noThink.messages[1].content).toContain(
      "Always output: <answer> [your answer] </answer> with no extra text.",
    );
  });

  it("rejects bad input with one line on stderr and exit status 2", async () => {
    expectUsageError(await rollgym(["envs", "sample", "Sokoban", "--seeds", "1"]), [
      "unknown tag",
      "SimpleSokoban",
    ]);
    expectUsageError(await runInProcess(["envs", "sample", "SimpleSokoban", "--seeds", "5..3"]), [
      "--seeds",
      "B < A",
    ]);
    expectUsageError(await runInProcess(["envs", "sample", "SimpleSokoban", "--seeds", "-1"]), [
      "--seeds",
      "4294967295",
    ]);
    expectUsageError(await runInProcess(["envs", "sample", "SimpleSokoban", "--seeds", "4294967296"]), [
      "--seeds",
    ]);
    expectUsageError(await runInProcess(["envs", "sample", "SimpleSokoban", "--seeds", "1.5"]), ["--seeds"]);
    expectUsageError(await runInProcess(["envs", "sample", "SimpleSokoban", "--seeds", "1..2..3"]), [
      "--seeds",
      "A..B",
    ]);
    expectUsageError(await runInProcess(["envs", "sample", "SimpleSokoban", "--seeds", "a..b"]), ["--seeds"]);
    expectUsageError(await runInProcess(["envs", "sample", "SimpleSokoban"]), ["--seeds"]);
    expectUsageError(await runInProcess(["envs", "sample", "SimpleSokoban", "--seeds", "1", "--bogus"]), [
      "--bogus",
      "--solve",
    ]);
    expectUsageError(
      await runInProcess(["envs", "play", "SimpleSokoban", "--seed", "1", "--actions", "Up,Jump"]),
      ["Jump", "Up, Down, Left, Right"],
    );
    expectUsageError(
      await runInProcess(["envs", "play", "Bandit", "--seed", "123", "--actions", "Teacher"]),
      ["Teacher", "Planner, Artist"],
    );
    expectUsageError(
      await runInProcess(["envs", "play", "SimpleSokoban", "--seed", "x", "--actions", "Up"]),
      ["--seed"],
    );
    expectUsageError(await runInProcess(["envs", "prompt", "Nope", "--seed", "1"]), ["unknown tag"]);
    expectUsageError(await runInProcess(["envs", "frobnicate"]), ["unknown command"]);
  });
});

describe.concurrent("rollgym parse", () => {
  it("parses a think response, cuts to two actions and rebuilds the text", async () => {
    const r = await rollgym(
      ["parse", "SimpleSokoban"],
      "<think>go</think> <answer>Up || left|| Jump ||Down</answer> tail",
    );
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({
      parsed: ["Up", "left"],
      actions: ["Up", "Left"],
      llm_response: "<think>go</think><answer>Up || left</answer>",
      format_penalty: false,
    });
  });

  it("penalises an unknown action and a missing answer", async () => {
    const bad = JSON.parse(
      (await rollgym(["parse", "SimpleSokoban"], "<think>x</think><answer>Jump || Up</answer>")).stdout,
    );
    expect(bad).toMatchObject({ parsed: ["Jump", "Up"], actions: ["Up"], format_penalty: true });
    const none = JSON.parse((await rollgym(["parse", "SimpleSokoban"], "<think>no answer here")).stdout);
    expect(none).toEqual({
      parsed: [],
      actions: [],
      llm_response: "<think>no answer here",
      format_penalty: true,
    });
  });

  it("uses the seed's arm names for Bandit and honours --no-think and --max-actions-per-turn", async () => {
    const r = await rollgym(
      ["parse", "Bandit", "--seed", "123", "--no-think", "--max-actions-per-turn", "1"],
      "<answer> artist </answer>",
    );
    expect(JSON.parse(r.stdout)).toMatchObject({
      parsed: ["artist"],
      actions: ["Artist"],
      format_penalty: false,
    });
  });

  it("rejects bad flags", async () => {
    expectUsageError(await rollgym(["parse", "Nope"], ""), ["unknown tag"]);
    expectUsageError(await rollgym(["parse", "SimpleSokoban", "--max-actions-per-turn", "0"], ""), [
      "--max-actions-per-turn",
    ]);
    expectUsageError(await rollgym(["parse", "SimpleSokoban", "--seed", "-3"], ""), ["--seed"]);
    expectUsageError(await rollgym(["parse"], ""), ["<TAG>"]);
  });
});
