// Text renders of a Sokoban room, exactly as RAGEN prints them.
import { BOX, BOX_ON_TARGET, PLAYER, type Room, TARGET } from "./room.ts";

export type ObservationFormat = "grid" | "coord" | "grid_coord";

/** Code 6 exists only here: the player standing on a target. */
const PLAYER_ON_TARGET = 6;

export function renderGrid(room: Room, gridLookup: Readonly<Record<string, string>>): string {
  const { rows, cols, state, fixed } = room;
  let text = "";
  for (let r = 0; r < rows; r++) {
    if (r > 0) text += "\n";
    for (let i = r * cols; i < (r + 1) * cols; i++) {
      const code = state[i] === PLAYER && fixed[i] === TARGET ? PLAYER_ON_TARGET : state[i];
      text += gridLookup[code] ?? "?";
    }
  }
  return text;
}

/** "(r, c)" of each cell index, per column count: a room's renders all name the same few cells. */
const coordTexts = new Map<number, string[]>();

function coordText(cols: number, i: number): string {
  let texts = coordTexts.get(cols);
  if (texts === undefined) {
    texts = [];
    coordTexts.set(cols, texts);
  }
  let text = texts[i];
  if (text === undefined) {
    text = `(${Math.trunc(i / cols)}, ${i % cols})`;
    texts[i] = text;
  }
  return text;
}

/** Walls are left out, as RAGEN does ("too heavy"); every target is listed, covered or not. */
export function renderCoord(room: Room): string {
  const { state, fixed, cols } = room;
  // One pass over the cells, each list in cell order, as one pass per entity would give.
  let targets = "";
  let boxes = "";
  let boxesOnTarget = "";
  let player = "";
  let playerOnTarget = "";
  for (let i = 0; i < state.length; i++) {
    const code = state[i];
    const onTarget = fixed[i] === TARGET;
    if (onTarget) targets = listed(targets, cols, i);
    if (code === BOX) boxes = listed(boxes, cols, i);
    else if (code === BOX_ON_TARGET) boxesOnTarget = listed(boxesOnTarget, cols, i);
    else if (code === PLAYER) {
      if (onTarget) playerOnTarget = listed(playerOnTarget, cols, i);
      else player = listed(player, cols, i);
    }
  }
  let text = `Board size: ${room.rows} rows x ${cols} cols (zero-indexed).`;
  if (targets) text += `\nTargets: ${targets}`;
  if (boxes) text += `\nBoxes: ${boxes}`;
  if (boxesOnTarget) text += `\nBoxes on target: ${boxesOnTarget}`;
  if (player) text += `\nPlayer: ${player}`;
  if (playerOnTarget) text += `\nPlayer on target: ${playerOnTarget}`;
  return text;
}

/** `list` with cell `i` added, comma-separated. */
function listed(list: string, cols: number, i: number): string {
  const text = coordText(cols, i);
  return list === "" ? text : `${list}, ${text}`;
}

export function renderRoom(
  room: Room,
  format: ObservationFormat,
  gridLookup: Readonly<Record<string, string>>,
): string {
  switch (format) {
    case "grid":
      return renderGrid(room, gridLookup);
    case "coord":
      return renderCoord(room);
    case "grid_coord":
      return `Coordinates: \n${renderCoord(room)}\nGrid Map: \n${renderGrid(room, gridLookup)}`;
  }
}
