// RAGEN's FrozenLake map generation: a board of frozen (F) and hole (H) tiles drawn from
// NumPy's PCG64 Generator, a random start and goal, redrawn until the goal is reachable.
import { NumpyGenerator } from "../rng/numpy-generator.ts";

/** Rows of the map, e.g. ["FFFF", "FFHS", "GFFF", "FFFF"]. */
export function generateMap(size: number, pFrozen: number, seed: number): string[] {
  const rng = new NumpyGenerator(seed);
  for (;;) {
    const board = rng.choice(["F", "H"], size * size, [pFrozen, 1 - pFrozen]);
    const start = rng.integers(0, size) * size + rng.integers(0, size);
    const goal = rng.integers(0, size) * size + rng.integers(0, size);
    if (start === goal) continue;
    board[start] = "S";
    board[goal] = "G";
    if (reachable(board, size, start, goal)) {
      const rows: string[] = [];
      for (let r = 0; r < size; r++) rows.push(board.slice(r * size, (r + 1) * size).join(""));
      return rows;
    }
  }
}

/** Whether the goal can be reached from the start through 4-neighbours that are not holes. */
function reachable(board: readonly string[], size: number, start: number, goal: number): boolean {
  const seen = new Uint8Array(size * size);
  const stack = [start];
  seen[start] = 1;
  while (stack.length > 0) {
    const cell = stack.pop()!;
    if (cell === goal) return true;
    const r = Math.trunc(cell / size);
    const c = cell % size;
    for (const [nr, nc] of [
      [r + 1, c],
      [r, c + 1],
      [r - 1, c],
      [r, c - 1],
    ]) {
      if (nr < 0 || nr >= size || nc < 0 || nc >= size) continue;
      const next = nr * size + nc;
      if (!seen[next] && board[next] !== "H") {
        seen[next] = 1;
        stack.push(next);
      }
    }
  }
  return false;
}
