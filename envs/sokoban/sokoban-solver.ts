// Breadth-first search for a shortest push sequence, as RAGEN's get_shortest_action_path:
// same move order (Up, Down, Left, Right), states deduplicated when popped, and an empty
// answer once a popped path is longer than the depth limit. Returns null when unsolvable.
import { type Room, TARGET, WALL } from "./room.ts";

const MOVES: readonly (readonly [number, number])[] = [
  [-1, 0],
  [1, 0],
  [0, -1],
  [0, 1],
];

/** Action ids 1..4 of a shortest solution from the room's current state, or null. */
export function solveRoom(
  room: Room,
  player: number,
  boxes: readonly number[],
  maxDepth = 100,
): number[] | null {
  const { rows, cols, fixed } = room;
  const numBoxes = boxes.length;
  // Nodes live in flat arrays: parent pointer and action reconstruct the path.
  const nodePlayer: number[] = [player];
  const nodeBoxes: number[] = [...boxes];
  const nodeParent: number[] = [-1];
  const nodeAction: number[] = [0];
  const nodeDepth: number[] = [0];
  const explored = new Set<string>();
  const boxSet = new Set<number>();

  for (let head = 0; head < nodePlayer.length; head++) {
    if (nodeDepth[head] > maxDepth) return null;
    const p = nodePlayer[head];
    const bx = nodeBoxes.slice(head * numBoxes, head * numBoxes + numBoxes);
    const key = `${p}|${[...bx].sort((a, b) => a - b).join(",")}`;
    if (explored.has(key)) continue;
    explored.add(key);
    if (bx.every((b) => fixed[b] === TARGET)) return pathTo(head, nodeParent, nodeAction);

    boxSet.clear();
    for (const b of bx) boxSet.add(b);
    const pr = Math.trunc(p / cols);
    const pc = p % cols;
    for (let a = 0; a < 4; a++) {
      const [dr, dc] = MOVES[a];
      const nr = pr + dr;
      const nc = pc + dc;
      if (nr < 0 || nr >= rows || nc < 0 || nc >= cols || fixed[nr * cols + nc] === WALL) continue;
      const next = nr * cols + nc;
      const newBoxes = bx.slice();
      if (boxSet.has(next)) {
        const br = nr + dr;
        const bc = nc + dc;
        if (br < 0 || br >= rows || bc < 0 || bc >= cols) continue;
        const to = br * cols + bc;
        if (fixed[to] === WALL || boxSet.has(to)) continue;
        newBoxes[bx.indexOf(next)] = to;
      }
      nodePlayer.push(next);
      nodeBoxes.push(...newBoxes);
      nodeParent.push(head);
      nodeAction.push(a + 1);
      nodeDepth.push(nodeDepth[head] + 1);
    }
  }
  return null;
}

function pathTo(node: number, parent: readonly number[], action: readonly number[]): number[] {
  const path: number[] = [];
  for (let n = node; parent[n] >= 0; n = parent[n]) path.push(action[n]);
  return path.reverse();
}
