// Text renders of a Sokoban room, exactly as RAGEN prints them.
import { BOX, BOX_ON_TARGET, PLAYER, type Room, TARGET } from "./room.ts";

export type ObservationFormat = "grid" | "coord" | "grid_coord";

/** Code 6 exists only here: the player standing on a target. */
const PLAYER_ON_TARGET = 6;

export function renderGrid(room: Room, gridLookup: Readonly<Record<string, string>>): string {
  const lines: string[] = [];
  for (let r = 0; r < room.rows; r++) {
    let line = "";
    for (let c = 0; c < room.cols; c++) {
      const i = r * room.cols + c;
      const code = room.state[i] === PLAYER && room.fixed[i] === TARGET ? PLAYER_ON_TARGET : room.state[i];
      line += gridLookup[code] ?? "?";
    }
    lines.push(line);
  }
  return lines.join("\n");
}

function coordList(room: Room, pick: (i: number) => boolean): string {
  const out: string[] = [];
  for (let i = 0; i < room.state.length; i++) {
    if (pick(i)) out.push(`(${Math.trunc(i / room.cols)}, ${i % room.cols})`);
  }
  return out.join(", ");
}

/** Walls are left out, as RAGEN does ("too heavy"); every target is listed, covered or not. */
export function renderCoord(room: Room): string {
  const { state, fixed } = room;
  const lines = [`Board size: ${room.rows} rows x ${room.cols} cols (zero-indexed).`];
  const entities: [string, (i: number) => boolean][] = [
    ["Targets", (i) => fixed[i] === TARGET],
    ["Boxes", (i) => state[i] === BOX],
    ["Boxes on target", (i) => state[i] === BOX_ON_TARGET],
    ["Player", (i) => state[i] === PLAYER && fixed[i] !== TARGET],
    ["Player on target", (i) => state[i] === PLAYER && fixed[i] === TARGET],
  ];
  for (const [label, pick] of entities) {
    const list = coordList(room, pick);
    if (list) lines.push(`${label}: ${list}`);
  }
  return lines.join("\n");
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
