// FrozenLake solvers: a shortest path when no slip happens, and the probability that an
// optimal policy reaches the goal within an action budget under the env's slipping.
import { type FrozenLakeConfig, neighbour, slipBranches } from "./frozen-lake-env.ts";

/** Shortest action ids (1 Left, 2 Down, 3 Right, 4 Up) from `from` to the goal, or null. */
export function shortestPath(tiles: readonly string[], size: number, from: number): number[] | null {
  const parent = new Int32Array(tiles.length).fill(-1);
  const action = new Int8Array(tiles.length);
  parent[from] = from;
  const queue = [from];
  for (let head = 0; head < queue.length; head++) {
    const cell = queue[head];
    if (tiles[cell] === "G") {
      const path: number[] = [];
      for (let c = cell; c !== from; c = parent[c]) path.push(action[c]);
      return path.reverse();
    }
    if (tiles[cell] === "H") continue;
    for (let dir = 0; dir < 4; dir++) {
      const next = neighbour(cell, dir, size);
      if (parent[next] !== -1) continue;
      parent[next] = cell;
      action[next] = dir + 1;
      queue.push(next);
    }
  }
  return null;
}

/** Finite-horizon value iteration: P(reach G within `budget` actions) under the best policy. */
export function successProbability(
  tiles: readonly string[],
  config: FrozenLakeConfig,
  from: number,
  budget: number,
): number {
  const n = tiles.length;
  let value = Float64Array.from(tiles, (t) => (t === "G" ? 1 : 0));
  for (let k = 0; k < budget; k++) {
    const next = new Float64Array(n);
    for (let cell = 0; cell < n; cell++) {
      if (tiles[cell] === "G") next[cell] = 1;
      if (tiles[cell] === "G" || tiles[cell] === "H") continue;
      let best = 0;
      for (let a = 0; a < 4; a++) {
        let v = 0;
        for (const [p, dir] of slipBranches(a, config)) v += p * value[neighbour(cell, dir, config.size)];
        if (v > best) best = v;
      }
      next[cell] = best;
    }
    value = next;
  }
  return value[from];
}
