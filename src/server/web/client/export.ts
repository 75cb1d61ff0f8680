// A batch's episodes to share or attach to experiment logs: a self-contained HTML page (inline
// styles and pictures, no script, nothing fetched) or one SVG image strip (a row per episode,
// a picture per turn). Pure string functions: the page downloads them, `rollgym export` writes
// them.
import { escapeHtml, PICTURE_CSS, type PictureStyle, stateSvg, stateTiles, TILE_DEFS } from "./picture.ts";
import {
  type GroupView,
  invalidMarks,
  num,
  responseParts,
  SPREAD_HELP,
  stats,
  tokenSummary,
} from "./records.ts";

export interface ExportBatch {
  title: string;
  /** One line about the batch (mode, tags, group size, seed, policy). */
  about: string;
  groups: GroupView[];
  metrics: Record<string, number | null>;
}

export type StyleOf = (tag: string) => PictureStyle | undefined;

const PAGE_CSS = `
body{font:14px/1.4 system-ui,sans-serif;margin:1.5rem;color:#1f2328;background:#f7f6f2}
h1{font-size:1.3rem;margin:0}h2{font-size:1.05rem;margin:1.2rem 0 .2rem}.muted{color:#5f6670}
.kept{color:#1f7a3d}.dropped,.bad{color:#b42318}.failed{color:#9a6700}.good{color:#1f7a3d}
details{background:#fff;border:1px solid #d8d4c8;border-radius:4px;margin:.3rem 0;padding:.2rem .5rem}
summary{cursor:pointer}.strip{display:flex;gap:.5rem;overflow-x:auto;padding:.4rem 0}
figure{margin:0;width:150px;flex:none}figure .board{width:150px}figcaption{font-size:12px}
pre{white-space:pre-wrap;font:11px ui-monospace,monospace;margin:0}
table{border-collapse:collapse;font-size:12px}td{padding:0 .6rem 0 0}
${PICTURE_CSS}`;

/** A list of a file's values as text (any type: the file may be crafted). */
function textList(values: unknown, separator = ", "): string {
  return Array.isArray(values) ? values.map(String).join(separator) : String(values ?? "");
}

function verdictText(g: GroupView): string {
  const s = stats(g.episodes.map((e) => e.reward));
  const verdict =
    g.verdict === "partial" ? `partial, interrupted after ${g.episodes.length} episodes` : g.verdict;
  return `${verdict} · reward ${num(s.min)} … ${num(s.max)}, mean ${num(s.mean)}, std ${num(s.std)}${g.score !== null ? ` · filter score ${num(g.score)}` : ""}`;
}

function figure(state: string, style: PictureStyle | undefined, caption: string): string {
  const picture = (style && stateSvg(state, style, "", true)) || `<pre>${escapeHtml(state)}</pre>`;
  return `<figure>${picture}<figcaption>${caption}</figcaption></figure>`;
}

/** The batch as one HTML page that needs nothing else. */
export function exportHtml(batch: ExportBatch, styleOf: StyleOf): string {
  const groups = batch.groups.map((g) => {
    const episodes = g.episodes.map((e) => {
      const style = styleOf(e.tag);
      const turns = e.turns.map((t) => {
        const answer = responseParts(t.raw_response).answer ?? t.raw_response;
        const marks = invalidMarks(t, e);
        return figure(
          t.state,
          style,
          `<b>Turn ${escapeHtml(t.turn)}</b>: ${escapeHtml(answer)} → ${escapeHtml(textList(t.actions) || "–")}, reward ${escapeHtml(t.reward_text)}${marks.length ? ` <span class="bad">(${escapeHtml(marks.join(", "))})</span>` : ""}`,
        );
      });
      turns.push(figure(e.final_state, style, `<b>End</b>: ${escapeHtml(e.end_reason)}`));
      const outcome = e.failure ? `failed: ${e.failure}` : e.success ? "✓ success" : "✗ no success";
      const tokens = e.tokens ? `<p class="muted">${escapeHtml(tokenSummary(e.tokens))}</p>` : "";
      return `<details><summary>Episode #${escapeHtml(e.env_id)} · ${escapeHtml(outcome)} · reward ${num(e.reward)} · score ${num(e.score)}</summary>${tokens}<div class="strip">${turns.join("")}</div></details>`;
    });
    return `<section><h2>Group ${escapeHtml(g.group)} · ${escapeHtml(g.tag)} · seed ${escapeHtml(g.seed)} · <span class="${escapeHtml(g.verdict)}">${escapeHtml(verdictText(g))}</span></h2>${episodes.join("")}</section>`;
  });
  const metrics = Object.entries(batch.metrics)
    .map(([k, v]) => `<tr><td>${escapeHtml(k)}</td><td>${num(v)}</td></tr>`)
    .join("");
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="${EXPORT_CSP}">
<title>${escapeHtml(batch.title)}</title><style>${PAGE_CSS}</style></head>
<body>${TILE_DEFS}<h1>${escapeHtml(batch.title)}</h1><p class="muted">${escapeHtml(batch.about)}</p>
${metrics ? `<details><summary>Metrics</summary><table>${metrics}</table></details>` : ""}
${groups.join("\n")}
<p class="muted">${escapeHtml(SPREAD_HELP.std)}. ${escapeHtml(SPREAD_HELP.filterScore)}.</p>
<p class="muted">Exported by rollgym.</p></body></html>
`;
}

/** The export runs nothing and fetches nothing: its styles and pictures are inline. */
export const EXPORT_CSP =
  "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'";

const CELL_W = 120;
const LABEL_H = 30;
const ROW_LABEL_W = 170;
const GAP = 8;

/** The batch's episodes as one SVG image: a row per episode, its states left to right. */
export function exportSvg(batch: ExportBatch, styleOf: StyleOf): string {
  const episodes = batch.groups.flatMap((g) => g.episodes.map((e) => ({ e, g })));
  const columns = Math.max(1, ...episodes.map(({ e }) => e.turns.length + 1));
  const rowH = CELL_W + LABEL_H + GAP;
  const width = ROW_LABEL_W + columns * (CELL_W + GAP);
  const height = 40 + episodes.length * rowH;
  const rows = episodes.map(({ e, g }, row) => {
    const y = 40 + row * rowH;
    const style = styleOf(e.tag);
    const states = [...e.turns.map((t) => t.state), e.final_state];
    const cells = states.map((state, i) => {
      const x = ROW_LABEL_W + i * (CELL_W + GAP);
      const picture = style ? stateTiles(state, style, true) : null;
      const turn = e.turns[i];
      const label = String(
        turn ? `${textList(turn.actions, " ") || "no action"} (${turn.reward_text})` : e.end_reason,
      );
      const image = picture
        ? `<svg class="board" x="${x}" y="${y}" width="${CELL_W}" height="${CELL_W}" viewBox="0 0 ${picture.width} ${picture.height}">${picture.tiles}</svg>`
        : `<rect x="${x}" y="${y}" width="${CELL_W}" height="${CELL_W}" fill="#fff" stroke="#ccc"/><text x="${x + 4}" y="${y + 16}" font-size="10">${escapeHtml(String(state).slice(0, 24))}</text>`;
      return `${image}<text x="${x}" y="${y + CELL_W + 14}" font-size="11">${escapeHtml(label.slice(0, 22))}</text>`;
    });
    const outcome = e.failure ? "failed" : e.success ? "success" : "no success";
    return `<text x="4" y="${y + 16}" font-size="13" font-weight="bold">#${escapeHtml(e.env_id)} · group ${escapeHtml(g.group)}</text><text x="4" y="${y + 34}" font-size="12">${escapeHtml(g.verdict)} · ${outcome}</text><text x="4" y="${y + 52}" font-size="12">reward ${num(e.reward)}</text>${cells.join("")}`;
  });
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif">
${TILE_DEFS}<rect width="100%" height="100%" fill="#f7f6f2"/>
<text x="4" y="24" font-size="16" font-weight="bold">${escapeHtml(batch.title)} — ${escapeHtml(batch.about)}</text>
${rows.join("\n")}
</svg>
`;
}
