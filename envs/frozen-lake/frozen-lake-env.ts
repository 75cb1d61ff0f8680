/**
 * FrozenLake as RAGEN plays it (gymnasium ≥ 1.2.1 dynamics on a RAGEN-generated map).
 *
 * Actions: 1 Left, 2 Down, 3 Right, 4 Up. On slippery ice the intended direction happens with
 * probability `success_rate`, each perpendicular one with (1 − success_rate)/2; moving into the
 * edge stays put. Rewards (Python ints): 1 on reaching the goal, 0 otherwise.
 * Episode end: terminated on the goal or in a hole; no step limit of its own.
 * Info: success (on the goal), action_is_effective (the position changed), action_is_valid.
 * Seeding: reset(seed) builds the map from `seed` and a fresh slip generator on the same seed,
 * which draws once at reset and once per step, as gymnasium does.
 */
import { NumpyGenerator } from "../rng/numpy-generator.ts";
import type { Env, JsonValue, StepResult } from "../types.ts";
import { generateMap } from "./map.ts";

export type ObservationFormat = "grid" | "coord" | "grid_coord";

export interface FrozenLakeConfig {
  size: number;
  p: number;
  success_rate: number;
  is_slippery: boolean;
  render_mode: "text";
  observation_format: ObservationFormat;
  grid_lookup: Record<string, string>;
  grid_vocab: Record<string, string>;
  action_lookup: Record<string, string>;
}

// gymnasium's direction ids: 0 left, 1 down, 2 right, 3 up; RAGEN's ids are these plus one.
const GYM_DELTAS: readonly (readonly [number, number])[] = [
  [0, -1],
  [1, 0],
  [0, 1],
  [-1, 0],
];

/** Where direction `dir` leads from `cell`, staying put at the edge. */
export function neighbour(cell: number, dir: number, size: number): number {
  const r = Math.min(Math.max(Math.trunc(cell / size) + GYM_DELTAS[dir][0], 0), size - 1);
  const c = Math.min(Math.max((cell % size) + GYM_DELTAS[dir][1], 0), size - 1);
  return r * size + c;
}

/** The (probability, direction) branches of gym action `a`: perpendicular, intended, perpendicular. */
export function slipBranches(a: number, config: FrozenLakeConfig): [number, number][] {
  if (!config.is_slippery) return [[1.0, a]];
  const fail = (1.0 - config.success_rate) / 2.0;
  return [
    [fail, (a + 3) % 4],
    [config.success_rate, a],
    [fail, (a + 1) % 4],
  ];
}

/** gymnasium's categorical_sample: first index whose running sum exceeds one draw (0 if none). */
function categorical(probs: readonly number[], rng: NumpyGenerator): number {
  const u = rng.random();
  let sum = 0;
  for (let i = 0; i < probs.length; i++) {
    sum += probs[i];
    if (sum > u) return i;
  }
  return 0;
}

export class FrozenLakeEnv implements Env {
  readonly config: FrozenLakeConfig;
  readonly actionNames: readonly string[];
  /** Tiles in row-major order: S, F, H, G. */
  private tiles: string[] = [];
  private cell = -1;
  private rng: NumpyGenerator | null = null;
  private finished = false;

  constructor(config: FrozenLakeConfig) {
    this.config = config;
    this.actionNames = [1, 2, 3, 4].map((id) => config.action_lookup[id]);
  }

  get done(): boolean {
    return this.finished;
  }

  get size(): number {
    return this.config.size;
  }

  /** The map rows, as gymnasium's desc. */
  get desc(): string[] {
    const n = this.config.size;
    const rows: string[] = [];
    for (let r = 0; r < n; r++) rows.push(this.tiles.slice(r * n, (r + 1) * n).join(""));
    return rows;
  }

  get position(): number {
    return this.cell;
  }

  tileAt(cell: number): string {
    return this.tiles[cell];
  }

  reset(seed: number): string {
    this.tiles = generateMap(this.config.size, this.config.p, seed).join("").split("");
    this.rng = new NumpyGenerator(seed);
    // The initial-state distribution puts all mass on S; gymnasium still draws once for it.
    const initial = this.tiles.map((t) => (t === "S" ? 1 : 0));
    this.cell = categorical(initial, this.rng);
    this.finished = false;
    return this.render();
  }

  /** Steps a reset, unfinished episode with an action of 1..4 (the registry's OrderEnforcing checks). */
  step(action: number): StepResult {
    const before = this.cell;
    const branches = slipBranches(action - 1, this.config);
    const i = categorical(
      branches.map(([p]) => p),
      this.rng!,
    );
    this.cell = neighbour(this.cell, branches[i][1], this.config.size);
    const tile = this.tiles[this.cell];
    this.finished = tile === "G" || tile === "H";
    return {
      observation: this.render(),
      reward: tile === "G" ? 1 : 0,
      terminated: this.finished,
      truncated: false,
      info: { action_is_effective: this.cell !== before, action_is_valid: true, success: tile === "G" },
    };
  }

  render(): string {
    switch (this.config.observation_format) {
      case "grid":
        return this.renderGrid();
      case "coord":
        return this.renderCoord();
      case "grid_coord":
        return `Coordinates: \n${this.renderCoord()}\nGrid Map: \n${this.renderGrid()}`;
    }
  }

  snapshot(): JsonValue {
    return {
      tiles: this.tiles.join(""),
      cell: this.cell,
      rng: this.rng ? (this.rng.getState() as unknown as JsonValue) : null,
      finished: this.finished,
    };
  }

  restore(snapshot: JsonValue): void {
    const s = snapshot as { [k: string]: JsonValue };
    this.tiles = (s.tiles as string).split("");
    this.cell = s.cell as number;
    this.rng = s.rng === null ? null : NumpyGenerator.fromState(s.rng as never);
    this.finished = s.finished as boolean;
  }

  private renderGrid(): string {
    // Lookup codes: 0 player, 1 frozen (and start), 2 hole, 3 goal, 4 player in hole, 5 player on goal.
    const lookup = this.config.grid_lookup;
    const n = this.config.size;
    const lines: string[] = [];
    for (let r = 0; r < n; r++) {
      let line = "";
      for (let c = 0; c < n; c++) {
        const i = r * n + c;
        const t = this.tiles[i];
        let code: number;
        if (i === this.cell) code = t === "H" ? 4 : t === "G" ? 5 : 0;
        else code = t === "H" ? 2 : t === "G" ? 3 : 1;
        line += lookup[code] ?? "?";
      }
      lines.push(line);
    }
    return lines.join("\n");
  }

  private renderCoord(): string {
    const n = this.config.size;
    const at = (i: number) => `(${Math.trunc(i / n)}, ${i % n})`;
    const cellsOf = (tile: string) => this.tiles.flatMap((t, i) => (t === tile ? [at(i)] : [])).join(", ");
    const lines = [`Board size: ${n} rows x ${n} cols (zero-indexed).`];
    const start = cellsOf("S");
    if (start) lines.push(`Start: ${start}`);
    const goal = cellsOf("G");
    if (goal) lines.push(`Goal: ${goal}`);
    const here = this.tiles[this.cell];
    const label = here === "G" ? "Player on goal" : here === "H" ? "Player in hole" : "Player";
    lines.push(`${label}: ${at(this.cell)}`);
    const holes = cellsOf("H");
    if (holes) lines.push(`Holes: ${holes}`);
    return lines.join("\n");
  }
}
