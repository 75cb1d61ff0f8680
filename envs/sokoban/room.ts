// Sokoban room generation as gym_sokoban does it and RAGEN extends it, draw for draw:
// a random-walk topology (CPython `random`), player and boxes placed on floor (NumPy's legacy
// global RNG), a reverse-playing depth-first search that pulls boxes away from their targets,
// up to `tries` attempts, then RAGEN's extra random player walk (CPython `random` again).
import { NumpyRandomState } from "../rng/numpy-random-state.ts";
import { PythonRandom } from "../rng/python-random.ts";

/** Tile codes of `fixed`: the immovable layout. */
export const WALL = 0;
export const FLOOR = 1;
export const TARGET = 2;
/** Extra codes of `state`: the live room. */
export const BOX_ON_TARGET = 3;
export const BOX = 4;
export const PLAYER = 5;

export interface Room {
  rows: number;
  cols: number;
  fixed: Uint8Array;
  state: Uint8Array;
}

export interface RoomSpec {
  rows: number;
  cols: number;
  numBoxes: number;
  searchDepth: number;
  /** gym_sokoban's num_gen_steps, int(1.7 * (rows + cols)) unless given. */
  numGenSteps?: number;
  pChangeDirections?: number;
  tries?: number;
}

/** Generation failed the way gym_sokoban raises RuntimeError or RuntimeWarning. */
export class RoomGenerationError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "RoomGenerationError";
  }
}

/** Cap on explored states in the reverse search, as gym_sokoban. */
const MAX_EXPLORED_STATES = 300_000;

const DIRECTIONS: readonly (readonly [number, number])[] = [
  [1, 0],
  [0, 1],
  [-1, 0],
  [0, -1],
];

// The five 3×3 stamps of the topology walk, centred on the walker.
const MASKS: readonly (readonly number[])[] = [
  [0, 0, 0, 1, 1, 1, 0, 0, 0],
  [0, 1, 0, 0, 1, 0, 0, 1, 0],
  [0, 0, 0, 1, 1, 0, 0, 1, 0],
  [0, 0, 0, 1, 1, 0, 1, 1, 0],
  [0, 0, 0, 0, 1, 1, 0, 1, 0],
];

export function defaultGenSteps(rows: number, cols: number): number {
  return Math.trunc(1.7 * (rows + cols));
}

/**
 * Generate the room RAGEN's SokobanEnv.reset(seed) builds. Throws RoomGenerationError where
 * gym_sokoban would raise; the env decides how to reseed (and keeps recent rooms, sokoban-env.ts).
 */
export function generateRoom(seed: number, spec: RoomSpec): Room {
  const py = new PythonRandom(seed);
  const np = new NumpyRandomState(seed);
  const { rows, cols, numBoxes, searchDepth } = spec;
  const genSteps = spec.numGenSteps ?? defaultGenSteps(rows, cols);
  const tries = spec.tries ?? 4;

  let fixed: Uint8Array = new Uint8Array(rows * cols);
  let state: Uint8Array = new Uint8Array(rows * cols);
  let displacement = 0;
  for (let t = 0; t < tries; t++) {
    const room = topology(py, rows, cols, genSteps, spec.pChangeDirections ?? 0.35);
    placePlayerAndBoxes(np, room, numBoxes);
    fixed = room.map((v) => (v === PLAYER ? FLOOR : v));
    state = room.map((v) => (v === TARGET ? BOX : v));
    const search = new ReverseSearch(state, fixed, cols);
    search.run(searchDepth);
    state = search.bestState;
    for (let i = 0; i < state.length; i++) if (state[i] === BOX_ON_TARGET) state[i] = BOX;
    displacement = search.bestDisplacement();
    if (displacement > 0) break;
  }
  if (displacement === 0) throw new RoomGenerationError("Generated Model with score == 0");
  randomPlayerWalk(py, state, fixed, cols, displacement === 1 ? 0.8 : 0.5);
  return { rows, cols, fixed, state };
}

function topology(py: PythonRandom, rows: number, cols: number, steps: number, pChange: number): Uint8Array {
  // gym_sokoban draws with random.sample(…, 1)[0]: for these short lists that is one
  // randbelow(len), exactly as choice draws, without sample's pool and result lists.
  let direction = py.choice(DIRECTIONS);
  let r = py.randint(1, rows - 1);
  let c = py.randint(1, cols - 1);
  const level = new Uint8Array(rows * cols);
  for (let s = 0; s < steps; s++) {
    if (py.random() < pChange) direction = py.choice(DIRECTIONS);
    r = Math.max(Math.min(r + direction[0], rows - 2), 1);
    c = Math.max(Math.min(c + direction[1], cols - 2), 1);
    const mask = py.choice(MASKS);
    for (let dr = 0; dr < 3; dr++) {
      for (let dc = 0; dc < 3; dc++) {
        if (mask[dr * 3 + dc]) level[(r - 1 + dr) * cols + (c - 1 + dc)] = 1;
      }
    }
  }
  for (let i = 0; i < rows; i++) {
    level[i * cols] = WALL;
    level[i * cols + cols - 1] = WALL;
  }
  for (let j = 0; j < cols; j++) {
    level[j] = WALL;
    level[(rows - 1) * cols + j] = WALL;
  }
  return level;
}

/** Player on a random floor cell, then each box (= its target) on a random remaining one. */
function placePlayerAndBoxes(np: NumpyRandomState, room: Uint8Array, numBoxes: number): void {
  let floor = cellsWith(room, FLOOR);
  if (floor.length <= numBoxes + 1) {
    throw new RoomGenerationError(
      `Not enough free spots (#${floor.length}) to place 1 player and ${numBoxes} boxes.`,
    );
  }
  room[floor[np.randint(floor.length)]] = PLAYER;
  for (let b = 0; b < numBoxes; b++) {
    floor = cellsWith(room, FLOOR);
    room[floor[np.randint(floor.length)]] = TARGET;
  }
}

function cellsWith(room: Uint8Array, code: number): number[] {
  const cells: number[] = [];
  for (let i = 0; i < room.length; i++) if (room[i] === code) cells.push(i);
  return cells;
}

/**
 * gym_sokoban's reverse playing: a depth-first search over pulls from the solved room that keeps
 * the first state with the highest box_swaps × displacement score. States are keyed by the whole
 * room (box codes 3 and 4 differ), explored once, in pull order up, down, left, right.
 * The room is modified in place and restored after each branch, so nothing is copied per node.
 */
class ReverseSearch {
  readonly state: Uint8Array;
  readonly fixed: Uint8Array;
  readonly cols: number;
  readonly targets: Int32Array;
  /** Current cell of the box that started on targets[k]. */
  readonly boxAt: Int32Array;
  readonly explored = new Set<number | string>();
  bestScore = -1;
  bestState: Uint8Array;
  readonly bestBoxAt: Int32Array;
  private readonly deltas: Int32Array;
  private readonly sortScratch: Int32Array;

  constructor(state: Uint8Array, fixed: Uint8Array, cols: number) {
    this.state = state;
    this.fixed = fixed;
    this.cols = cols;
    this.targets = Int32Array.from(cellsWith(fixed, TARGET));
    this.boxAt = Int32Array.from(this.targets);
    this.bestState = state.slice();
    this.bestBoxAt = Int32Array.from(this.targets);
    this.deltas = Int32Array.of(-cols, cols, -1, 1);
    this.sortScratch = new Int32Array(this.targets.length);
  }

  run(searchDepth: number): void {
    this.dfs(this.state.indexOf(PLAYER), 0, -1, searchDepth);
  }

  bestDisplacement(): number {
    return this.displacement(this.bestBoxAt);
  }

  private dfs(player: number, boxSwaps: number, lastPull: number, ttl: number): void {
    ttl -= 1;
    if (ttl <= 0 || this.explored.size >= MAX_EXPLORED_STATES) return;
    const key = this.stateKey(player);
    if (this.explored.has(key)) return;

    let score = boxSwaps * this.displacement(this.boxAt);
    if (this.visibleTargets() !== this.targets.length) score = 0;
    if (score > this.bestScore) {
      this.bestScore = score;
      this.bestState = this.state.slice();
      this.bestBoxAt.set(this.boxAt);
    }
    this.explored.add(key);

    const { state, fixed, deltas } = this;
    for (let a = 0; a < 4; a++) {
      const d = deltas[a];
      const next = player + d;
      const nextCode = state[next];
      // A blocked move leaves the room as it is; the recursive call would find it explored.
      if (nextCode !== FLOOR && nextCode !== TARGET) continue;
      state[player] = fixed[player];
      state[next] = PLAYER;
      const from = player - d;
      const fromCode = state[from];
      let pulled = -1;
      if (fromCode === BOX_ON_TARGET || fromCode === BOX) {
        state[player] = BOX_ON_TARGET;
        state[from] = fixed[from];
        pulled = this.boxAt.indexOf(from);
        this.boxAt[pulled] = player;
      }
      const nextPull = pulled >= 0 ? pulled : lastPull;
      this.dfs(next, nextPull !== lastPull ? boxSwaps + 1 : boxSwaps, nextPull, ttl);
      if (pulled >= 0) {
        this.boxAt[pulled] = from;
        state[from] = fromCode;
      }
      state[next] = nextCode;
      state[player] = PLAYER;
    }
  }

  private displacement(boxAt: Int32Array): number {
    let sum = 0;
    for (let k = 0; k < boxAt.length; k++) {
      const b = boxAt[k];
      const t = this.targets[k];
      sum +=
        Math.abs(Math.trunc(b / this.cols) - Math.trunc(t / this.cols)) +
        Math.abs((b % this.cols) - (t % this.cols));
    }
    return sum;
  }

  private visibleTargets(): number {
    let n = 0;
    for (let k = 0; k < this.targets.length; k++) if (this.state[this.targets[k]] === TARGET) n++;
    return n;
  }

  /** The room is the fixed layout plus player and boxes, so those (with box codes) identify it. */
  private stateKey(player: number): number | string {
    const cells = this.state.length;
    const boxes = this.sortScratch;
    for (let k = 0; k < boxes.length; k++) {
      const at = this.boxAt[k];
      boxes[k] = at * 2 + (this.state[at] - BOX_ON_TARGET);
    }
    boxes.sort();
    let key = player;
    const radix = 2 * cells;
    if (cells * radix ** boxes.length < Number.MAX_SAFE_INTEGER) {
      for (let k = 0; k < boxes.length; k++) key = key * radix + boxes[k];
      return key;
    }
    return `${player}:${boxes.join(",")}`;
  }
}

/** RAGEN's add_random_player_movement: up to 3 steps onto unvisited free cells. */
function randomPlayerWalk(
  py: PythonRandom,
  state: Uint8Array,
  fixed: Uint8Array,
  cols: number,
  pMove: number,
): void {
  if (py.random() > pMove) return;
  const deltas = [-cols, cols, -1, 1];
  let player = state.indexOf(PLAYER);
  const visited = [player];
  let steps = 0;
  while (steps < 3) {
    const moves: number[] = [];
    for (const d of deltas) {
      const next = player + d;
      if ((state[next] === FLOOR || state[next] === TARGET) && !visited.includes(next)) moves.push(next);
    }
    if (moves.length === 0) break;
    const next = py.choice(moves);
    state[player] = fixed[player];
    state[next] = PLAYER;
    player = next;
    visited.push(player);
    steps++;
    if (steps >= 3 || py.random() > 0.5) break;
  }
}
