// Pictures of environment states, drawn from the very text the model reads: the grid is parsed
// with the tag's own grid_lookup (so SokobanDifferentGridVocab draws like SimpleSokoban) and
// drawn as SVG markup. Pure string functions: the page and the CLI's HTML export both use them.

export interface PictureStyle {
  env_type: string;
  config: { grid_lookup?: Record<string, string> };
}

/** The grid part of an observation as codes of the env's grid_lookup, or null if there is none. */
export function parseGrid(state: string, lookup: Record<string, string>): number[][] | null {
  if (typeof state !== "string") return null;
  const marker = state.lastIndexOf("Grid Map:");
  const text = (marker >= 0 ? state.slice(marker + "Grid Map:".length) : state).trim();
  const codes = new Map(Object.entries(lookup).map(([code, symbol]) => [symbol, Number(code)]));
  const rows = text.split("\n").map((line) => Array.from(line.trim(), (ch) => codes.get(ch)));
  if (rows.length === 0 || rows[0].length === 0) return null;
  if (rows.some((row) => row.length !== rows[0].length || row.some((c) => c === undefined))) return null;
  return rows as number[][];
}

const CELL = 40;

// Sokoban codes (gym_sokoban): wall, floor, target, box on target, box, player, player on target.
const SOKOBAN = ["wall", "floor", "target", "box-target", "box", "player", "player-target"];
// FrozenLake codes (RAGEN): player, ice, hole, goal, player in hole, player on goal.
const LAKE = ["player", "ice", "hole", "goal", "player-hole", "player-goal"];

// Colours as attributes (not a stylesheet), so a picture looks the same wherever it is pasted.
const FILL = {
  floor: 'fill="#ece6d6"',
  wall: 'fill="#6b5646"',
  ice: 'fill="#dcefff" stroke="#c2dcf2"',
  brick: 'fill="none" stroke="#54433a" stroke-width="2"',
  target: 'fill="none" stroke="#d8453b" stroke-width="3" stroke-dasharray="5 3"',
  box: 'fill="#c98a3a" stroke="#7a4f12" stroke-width="2"',
  boxOn: 'fill="#3fa35b" stroke="#1f6b36" stroke-width="2"',
  boxLine: 'stroke="#0003" stroke-width="2"',
  hole: 'fill="#1e3d5c"',
  goal: 'fill="#f0b323" stroke="#8a6210" stroke-width="2"',
  player: 'fill="#2d64d8" stroke="#163a86" stroke-width="1.5"',
  lost: 'stroke="#d8453b" stroke-width="4"',
};

/** One cell's drawing, in a 40 × 40 box. */
function tileBody(kind: string, lake: boolean): string {
  const c = CELL / 2;
  const parts: string[] = [];
  const ground = kind === "wall" ? "wall" : lake ? "ice" : "floor";
  // Crisp edges: a board scaled to a fractional cell size would otherwise show the page through
  // hairline seams between the tiles' anti-aliased edges.
  parts.push(
    `<rect class="${ground}" ${FILL[ground]} width="${CELL}" height="${CELL}" shape-rendering="crispEdges"/>`,
  );
  if (kind === "wall")
    parts.push(`<path ${FILL.brick} d="M0 13H40M0 27H40M20 0V13M10 13V27M30 13V27M20 27V40"/>`);
  if (kind.includes("target"))
    parts.push(`<circle class="target" ${FILL.target} cx="${c}" cy="${c}" r="12"/>`);
  if (kind.startsWith("box"))
    parts.push(
      `<rect class="box" ${kind === "box" ? FILL.box : FILL.boxOn} x="6" y="6" width="28" height="28" rx="3"/><path ${FILL.boxLine} d="M6 6L34 34M34 6L6 34"/>`,
    );
  if (kind.includes("hole"))
    parts.push(`<ellipse class="hole" ${FILL.hole} cx="${c}" cy="${c}" rx="16" ry="13"/>`);
  if (kind.includes("goal")) parts.push(`<path class="goal" ${FILL.goal} d="M13 33V7l16 6-16 6"/>`);
  if (kind.startsWith("player"))
    parts.push(
      `<g class="player" ${FILL.player}><circle cx="${c}" cy="14" r="6"/><path d="M11 34q9-22 18 0z"/></g>`,
      kind === "player-hole" ? `<path class="lost" ${FILL.lost} d="M8 8L32 32M32 8L8 32"/>` : "",
    );
  return parts.join("");
}

const tileId = (kind: string, lake: boolean) => `rg-${lake ? "l" : "s"}-${kind}`;

/**
 * Every tile once, as SVG definitions that pictures drawn with `refs` point to: an export
 * with hundreds of boards then carries each drawing once.
 */
export const TILE_DEFS = `<svg class="tile-defs" width="0" height="0" aria-hidden="true"><defs>${[
  ...SOKOBAN.map((k) => `<g id="${tileId(k, false)}">${tileBody(k, false)}</g>`),
  ...LAKE.map((k) => `<g id="${tileId(k, true)}">${tileBody(k, true)}</g>`),
].join("")}</defs></svg>`;

/** The tiles of a grid state as SVG markup, with the picture's size; null when there is no grid. */
export function stateTiles(
  state: string,
  style: PictureStyle,
  refs = false,
): { width: number; height: number; tiles: string } | null {
  const kinds = style.env_type === "sokoban" ? SOKOBAN : style.env_type === "frozen_lake" ? LAKE : null;
  if (!kinds || !style.config.grid_lookup) return null;
  const grid = parseGrid(state, style.config.grid_lookup);
  if (!grid) return null;
  const lake = kinds === LAKE;
  const tiles = grid.flatMap((row, y) =>
    row.map((code, x) => {
      const kind = kinds[code] ?? "floor";
      return refs
        ? `<use href="#${tileId(kind, lake)}" x="${x * CELL}" y="${y * CELL}"/>`
        : `<g transform="translate(${x * CELL} ${y * CELL})">${tileBody(kind, lake)}</g>`;
    }),
  );
  return { width: grid[0].length * CELL, height: grid.length * CELL, tiles: tiles.join("") };
}

/** An SVG picture of a grid state, or null when the state has no grid to draw. */
export function stateSvg(state: string, style: PictureStyle, label = "", refs = false): string | null {
  const picture = stateTiles(state, style, refs);
  if (!picture) return null;
  const { width: w, height: h } = picture;
  const name = label || `${style.env_type === "sokoban" ? "Sokoban" : "FrozenLake"} ${h / CELL}×${w / CELL}`;
  return `<svg class="board" viewBox="0 0 ${w} ${h}" width="${w}" height="${h}" role="img" aria-label="${escapeHtml(name)}">${picture.tiles}</svg>`;
}

/** Any value as text safe inside markup and attribute values (file data may be of any type). */
export function escapeHtml(value: unknown): string {
  return String(value).replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);
}

/** How the page and the exports size the pictures. */
export const PICTURE_CSS = ".board{max-width:100%;height:auto;display:block}.tile-defs{position:absolute}";
