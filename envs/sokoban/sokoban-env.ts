/**
 * Sokoban as RAGEN plays it (gym_sokoban dynamics, RAGEN's generation and renders).
 *
 * Actions: 1 Up, 2 Down, 3 Left, 4 Right — each pushes a box when one is ahead and the cell
 * beyond is free, otherwise moves the player when the cell ahead is free. Bumping costs a step.
 * Rewards: −0.1 per step, +1 when a box reaches a target, −1 when one leaves, +10 when all are on.
 * Episode end: terminated when every box is on a target; truncated after `max_steps` steps.
 * Info: success (all boxes on targets), action_is_effective (the player moved), action_is_valid.
 * Seeding: reset(seed) draws exactly what RAGEN's reset draws; a seed whose generation fails is
 * reseeded by `reseedAfterFailure` (RAGEN uses a per-process salted hash there; see docs).
 */
import type { Env, JsonValue, StepResult } from "../types.ts";
import { type ObservationFormat, renderRoom } from "./render.ts";
import {
  BOX,
  BOX_ON_TARGET,
  FLOOR,
  generateRoom,
  PLAYER,
  type Room,
  RoomGenerationError,
  TARGET,
} from "./room.ts";
import { solveRoom } from "./sokoban-solver.ts";

export interface SokobanConfig {
  dim_room: [number, number];
  max_steps: number;
  num_boxes: number;
  search_depth: number;
  grid_lookup: Record<string, string>;
  grid_vocab: Record<string, string>;
  action_lookup: Record<string, string>;
  render_mode: "text";
  observation_format: ObservationFormat;
}

/** Reseeds tried before giving up on a seed; no known seed needs more than one. */
const MAX_RESEEDS = 64;

/**
 * The fixed replacement for a seed whose room cannot be generated: a 32-bit integer mix
 * (the murmur3 finaliser of seed + golden ratio), so every process agrees on it.
 */
export function reseedAfterFailure(seed: number): number {
  let h = (seed + 0x9e3779b9) | 0;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/**
 * Rooms generated lately, by seed and room spec: the members of a group reset with one seed, and
 * generating the same room again for each of them (a search over thousands of states, 8 times a
 * group) was a long synchronous stretch of a server admitting groups. A room found here is
 * copied where steps change it (`state`); `fixed` is never written.
 */
const recentRooms = new Map<string, { room: Room; seed: number }>();
const RECENT_ROOMS = 64;

function roomFor(seed: number, spec: { rows: number; cols: number; numBoxes: number; searchDepth: number }) {
  const key = `${seed}:${spec.rows}:${spec.cols}:${spec.numBoxes}:${spec.searchDepth}`;
  let found = recentRooms.get(key);
  if (found === undefined) {
    let trySeed = seed;
    for (let attempt = 0; ; attempt++) {
      try {
        found = { room: generateRoom(trySeed, spec), seed: trySeed };
        break;
      } catch (error) {
        if (!(error instanceof RoomGenerationError) || attempt >= MAX_RESEEDS) throw error;
        trySeed = reseedAfterFailure(trySeed);
      }
    }
    if (recentRooms.size >= RECENT_ROOMS) recentRooms.delete(recentRooms.keys().next().value as string);
    recentRooms.set(key, found);
  }
  return { room: { ...found.room, state: found.room.state.slice() }, seed: found.seed };
}

export class SokobanEnv implements Env {
  readonly config: SokobanConfig;
  readonly actionNames: readonly string[];
  private room: Room = { rows: 0, cols: 0, fixed: new Uint8Array(0), state: new Uint8Array(0) };
  private player = -1;
  private steps = 0;
  private boxesOnTarget = 0;
  private finished = false;
  /** The seed the room was finally generated from (differs from the reset seed after a reseed). */
  generatedSeed = -1;

  constructor(config: SokobanConfig) {
    this.config = config;
    this.actionNames = [1, 2, 3, 4].map((id) => config.action_lookup[id]);
  }

  get done(): boolean {
    return this.finished;
  }

  reset(seed: number): string {
    const [rows, cols] = this.config.dim_room;
    const spec = { rows, cols, numBoxes: this.config.num_boxes, searchDepth: this.config.search_depth };
    const { room, seed: generatedSeed } = roomFor(seed, spec);
    this.room = room;
    this.generatedSeed = generatedSeed;
    this.player = this.room.state.indexOf(PLAYER);
    this.steps = 0;
    this.boxesOnTarget = 0;
    this.finished = false;
    return this.render();
  }

  /** Steps a reset, unfinished episode with an action of 1..4 (the registry's OrderEnforcing checks). */
  step(action: number): StepResult {
    this.steps += 1;
    const before = this.player;
    this.pushOrMove(action);

    let reward = -0.1;
    const uncovered = this.uncoveredTargets();
    const onTarget = this.config.num_boxes - uncovered;
    if (onTarget > this.boxesOnTarget) reward += 1;
    else if (onTarget < this.boxesOnTarget) reward += -1;
    const won = uncovered === 0;
    if (won) reward += 10;
    this.boxesOnTarget = onTarget;

    const truncated = !won && this.steps === this.config.max_steps;
    this.finished = won || truncated;
    return {
      observation: this.render(),
      reward,
      terminated: won,
      truncated,
      info: {
        action_is_effective: this.player !== before,
        action_is_valid: true,
        success: this.boxesOnTarget === this.config.num_boxes,
      },
    };
  }

  render(): string {
    return renderRoom(this.room, this.config.observation_format, this.config.grid_lookup);
  }

  /** A shortest solution from the current state as action ids, or null. */
  solve(maxDepth = 100): number[] | null {
    const boxes: number[] = [];
    this.room.state.forEach((code, i) => {
      if (code === BOX || code === BOX_ON_TARGET) boxes.push(i);
    });
    return solveRoom(this.room, this.player, boxes, maxDepth);
  }

  snapshot(): JsonValue {
    return {
      rows: this.room.rows,
      cols: this.room.cols,
      fixed: Array.from(this.room.fixed),
      state: Array.from(this.room.state),
      steps: this.steps,
      boxesOnTarget: this.boxesOnTarget,
      finished: this.finished,
      generatedSeed: this.generatedSeed,
    };
  }

  restore(snapshot: JsonValue): void {
    const s = snapshot as { [k: string]: JsonValue };
    this.room = {
      rows: s.rows as number,
      cols: s.cols as number,
      fixed: Uint8Array.from(s.fixed as number[]),
      state: Uint8Array.from(s.state as number[]),
    };
    this.player = this.room.state.indexOf(PLAYER);
    this.steps = s.steps as number;
    this.boxesOnTarget = s.boxesOnTarget as number;
    this.finished = s.finished as boolean;
    this.generatedSeed = s.generatedSeed as number;
  }

  /** gym_sokoban's _push: push a box ahead if the cell beyond is free, else try to move. */
  private pushOrMove(action: number): void {
    const { rows, cols, state, fixed } = this.room;
    const [dr, dc] = ACTION_DELTAS[action - 1];
    const r = Math.trunc(this.player / cols);
    const c = this.player % cols;
    const ahead = (r + dr) * cols + (c + dc);
    const br = r + 2 * dr;
    const bc = c + 2 * dc;
    if (br >= rows || bc >= cols) return; // gym_sokoban refuses pushes off the grid
    const beyond = br * cols + bc;
    const aheadCode = state[ahead];
    if ((aheadCode === BOX || aheadCode === BOX_ON_TARGET) && br >= 0 && bc >= 0) {
      const beyondCode = state[beyond];
      if (beyondCode === FLOOR || beyondCode === TARGET) {
        state[beyond] = fixed[beyond] === TARGET ? BOX_ON_TARGET : BOX;
        this.movePlayer(ahead);
        return;
      }
    }
    if (aheadCode === FLOOR || aheadCode === TARGET) this.movePlayer(ahead);
  }

  private movePlayer(to: number): void {
    const { state, fixed } = this.room;
    state[to] = PLAYER;
    state[this.player] = fixed[this.player];
    this.player = to;
  }

  /** Targets not covered by a box: empty ones plus the one the player stands on. */
  private uncoveredTargets(): number {
    const { state, fixed } = this.room;
    let n = 0;
    for (let i = 0; i < state.length; i++) {
      if (state[i] === TARGET || (state[i] === PLAYER && fixed[i] === TARGET)) n++;
    }
    return n;
  }
}

const ACTION_DELTAS: readonly (readonly [number, number])[] = [
  [-1, 0],
  [1, 0],
  [0, -1],
  [0, 1],
];
