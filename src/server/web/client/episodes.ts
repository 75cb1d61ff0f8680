/// <reference lib="dom" />
// What Watch and Replay show alike: group cards (reward spread and the filter's verdict),
// the charts, and an episode's turn-by-turn timeline with a slider and play/pause.
import type { EpisodeRecord, TurnRecord } from "../../../record/episode-record.ts";
import { h, markup, num, type TagInfo } from "./api.ts";
import type { ExportBatch } from "./export.ts";
import { escapeHtml, stateSvg } from "./picture.ts";
import { type GroupView, invalidMarks, responseParts, SPREAD_HELP, stats } from "./records.ts";

export type { GroupView, Verdict } from "./records.ts";

const PARTIAL = "the rollout was interrupted before this group finished: these are the episodes that did";

export function groupCard(
  group: GroupView,
  open: (envId: number) => void,
  selected: number | null,
): HTMLElement {
  const rewards = group.episodes.map((e) => e.reward);
  const s = stats(rewards);
  const solved = group.episodes.filter((e) => e.success).length;
  return h(
    "article",
    { class: `group ${group.verdict}`, "data-group": group.group },
    h(
      "header",
      {},
      h("strong", {}, `Group ${group.group}`),
      ` ${group.tag} · seed ${group.seed} `,
      h(
        "span",
        {
          class: `verdict ${group.verdict}`,
          "data-testid": "verdict",
          title: group.verdict === "partial" ? PARTIAL : null,
        },
        group.verdict,
      ),
      group.versions !== undefined ? versionNote(group) : null,
    ),
    h(
      "p",
      { class: "spread" },
      `reward ${num(s.min)} … ${num(s.max)} · mean ${num(s.mean)} · `,
      h("abbr", { title: SPREAD_HELP.std }, "std"),
      ` ${num(s.std)} · solved ${solved}/${group.episodes.length}`,
      group.score !== null
        ? [" · ", h("abbr", { title: SPREAD_HELP.filterScore }, "filter score"), ` ${num(group.score)}`]
        : "",
    ),
    h(
      "div",
      { class: "episodes" },
      group.episodes.map((e) =>
        h(
          "button",
          {
            type: "button",
            class: `ep ${e.failure ? "failed" : e.success ? "good" : "bad"}`,
            "aria-pressed": selected === e.env_id ? "true" : "false",
            title: `env ${e.env_id}: reward ${num(e.reward)}${e.failure ? ` (failed: ${e.failure})` : ""}`,
            onclick: () => open(e.env_id),
          },
          `#${e.env_id} ${e.success ? "✓" : "✗"} ${num(e.reward)}`,
        ),
      ),
    ),
  );
}

/** A group's weight versions and, once its window is judged, its age (in versions). */
function versionNote(group: GroupView): HTMLElement {
  const v = group.versions;
  const played = v ? (v.min === v.max ? `v${v.min}` : `v${v.min}–${v.max}`) : "v–";
  const age = group.age !== undefined && group.age !== null ? ` · age ${group.age}` : "";
  return h(
    "span",
    {
      class: "muted",
      "data-testid": "group-version",
      title:
        "weight versions that played the group's turns; age: versions behind the one in force at its window's verdict",
    },
    ` ${played}${age}`,
  );
}

/**
 * The group cards as one stop in the Tab order (a batch has hundreds of episode chips, and
 * the episode's own controls come after them): the selected chip, or the first, takes Tab;
 * arrow keys, Home and End move among the chips.
 */
export function groupGrid(cards: HTMLElement[]): HTMLElement {
  const grid = h("div", { class: "groups", role: "group", "aria-label": "Episodes by group" }, cards);
  const chips = [...grid.querySelectorAll<HTMLButtonElement>("button.ep")];
  const current = chips.find((c) => c.getAttribute("aria-pressed") === "true") ?? chips[0];
  for (const chip of chips) chip.tabIndex = chip === current ? 0 : -1;
  grid.addEventListener("keydown", (event: KeyboardEvent) => {
    const at = chips.indexOf(event.target as HTMLButtonElement);
    if (at < 0) return;
    const moves: Record<string, number> = {
      ArrowRight: at + 1,
      ArrowDown: at + 1,
      ArrowLeft: at - 1,
      ArrowUp: at - 1,
      Home: 0,
      End: chips.length - 1,
    };
    const next = chips[moves[event.key]];
    if (!(event.key in moves) || !next) return;
    event.preventDefault();
    chips[at].tabIndex = -1;
    next.tabIndex = 0;
    next.focus();
  });
  return grid;
}

const CHART_W = 360;
const CHART_H = 140;
const PAD = 28;

/** Every episode's reward as a dot in its group's column, columns tinted by verdict. */
export function rewardChart(groups: readonly GroupView[]): string {
  const all = groups.flatMap((g) => g.episodes.map((e) => e.reward));
  if (all.length === 0) return "";
  let lo = Math.min(0, ...all);
  let hi = Math.max(...all);
  if (hi === lo) hi = lo + 1;
  const n = Math.max(...groups.map((g) => g.group)) + 1;
  const colW = (CHART_W - PAD) / n;
  const y = (v: number) => CHART_H - PAD / 2 - ((v - lo) / (hi - lo)) * (CHART_H - PAD);
  const parts: string[] = [];
  for (const g of groups) {
    const x = PAD + g.group * colW;
    parts.push(
      `<rect class="col ${escapeHtml(g.verdict)}" x="${escapeHtml(x + 1)}" y="4" width="${Math.max(colW - 2, 1)}" height="${CHART_H - PAD / 2 - 4}"><title>group ${escapeHtml(g.group)}: ${escapeHtml(g.verdict)}</title></rect>`,
    );
    g.episodes.forEach((e, i) => {
      const cx = x + colW / 2 + ((i % 5) - 2) * Math.min(colW / 8, 3);
      parts.push(
        `<circle class="${e.success ? "good" : "bad"}" cx="${escapeHtml(cx.toFixed(1))}" cy="${escapeHtml(y(e.reward).toFixed(1))}" r="3"/>`,
      );
    });
  }
  lo = Math.round(lo * 100) / 100;
  return chart(
    "Reward per episode, by group",
    `<text x="2" y="${y(hi) + 4}">${num(hi)}</text><text x="2" y="${y(lo) + 4}">${num(lo)}</text>${parts.join("")}`,
  );
}

/** Success rate per batch, as a line. */
export function successChart(points: readonly { label: string; value: number }[]): string {
  if (points.length === 0) return "";
  const step = (CHART_W - PAD * 2) / Math.max(points.length - 1, 1);
  const at = (i: number, v: number) =>
    `${(PAD + i * step).toFixed(1)},${(CHART_H - PAD / 2 - v * (CHART_H - PAD)).toFixed(1)}`;
  const line = points.map((p, i) => at(i, p.value)).join(" ");
  const dots = points
    .map((p, i) => {
      const [cx, cy] = at(i, p.value).split(",");
      return `<circle class="good" cx="${cx}" cy="${cy}" r="3.5"><title>${escapeHtml(p.label)}: ${num(p.value)}</title></circle>`;
    })
    .join("");
  return chart(
    "Success rate per batch",
    `<text x="2" y="${CHART_H - PAD + 18}">0</text><text x="2" y="${PAD / 2 + 4}">1</text><polyline class="line" points="${line}"/>${dots}`,
  );
}

function chart(title: string, body: string): string {
  return `<figure class="chart"><figcaption>${escapeHtml(title)}</figcaption><svg viewBox="0 0 ${CHART_W} ${CHART_H}" role="img" aria-label="${escapeHtml(title)}">${body}</svg></figure>`;
}

function picture(state: string, style: TagInfo | undefined, label: string, className = ""): HTMLElement {
  const svg = style ? stateSvg(state, style, label) : null;
  return svg ? markup(svg, `picture ${className}`) : h("pre", { class: `state-text ${className}` }, state);
}

const PLAY_MS = 900;

/**
 * An episode, one turn at a time: the state the model saw, its response (think and answer),
 * parsed and executed actions, reward and invalid-turn marks; the last position is the final
 * state. A slider, play/pause and the timeline strip move between turns.
 */
export function episodeView(
  episode: EpisodeRecord,
  style: TagInfo | undefined,
  options: { turn?: number; onTurn?: (turn: number) => void } = {},
): { element: HTMLElement; destroy: () => void } {
  const last = episode.turns.length;
  let position = Math.min(Math.max(options.turn ?? 0, 0), last);
  let timer: ReturnType<typeof setInterval> | null = null;

  const slider = h("input", {
    type: "range",
    min: 0,
    max: last,
    value: String(position),
    "aria-label": "Turn",
    oninput: () => show(Number(slider.value)),
  });
  const where = h("span", { class: "where", "data-testid": "turn-label" });
  const playButton = h("button", { type: "button", onclick: () => toggle() }, "Play");
  const detail = h("div", { class: "turn-detail" });
  const strip = timeline(episode, style, (i) => show(i));

  const stop = () => {
    if (timer) clearInterval(timer);
    timer = null;
    playButton.textContent = "Play";
  };
  const toggle = () => {
    if (timer) return stop();
    if (position >= last) show(0);
    playButton.textContent = "Pause";
    timer = setInterval(() => {
      if (position >= last) stop();
      else show(position + 1);
    }, PLAY_MS);
  };

  function show(k: number): void {
    position = Math.min(Math.max(k, 0), last);
    slider.value = String(position);
    where.textContent =
      position < last ? `Turn ${position + 1} of ${last}` : `Final state (after ${last} turns)`;
    for (const [i, b] of strip.querySelectorAll("button").entries())
      b.toggleAttribute("aria-current", i === position);
    options.onTurn?.(position);
    const turn = episode.turns[position];
    detail.replaceChildren(...(turn ? turnDetail(turn, episode, style) : finalDetail(episode, style)));
  }

  const element = h(
    "section",
    { class: "episode", "aria-label": `Episode ${episode.env_id}` },
    episodeHeader(episode),
    h(
      "div",
      { class: "stepper" },
      h("button", { type: "button", onclick: () => show(position - 1), "aria-label": "Previous turn" }, "◀"),
      playButton,
      h("button", { type: "button", onclick: () => show(position + 1), "aria-label": "Next turn" }, "▶"),
      slider,
      where,
    ),
    strip,
    detail,
    tokenOverlay(episode),
  );
  show(position);
  return { element, destroy: stop };
}

function episodeHeader(episode: EpisodeRecord): HTMLElement {
  return h(
    "header",
    {},
    h("h2", {}, `Episode #${episode.env_id}`),
    h(
      "p",
      {},
      `group ${episode.group_id} · ${episode.tag} · seed ${episode.seed} · reward ${num(episode.reward)} · penalty ${num(episode.penalty)} · score ${num(episode.score)} · `,
      h("strong", { class: episode.success ? "good" : "bad" }, episode.success ? "success" : "no success"),
    ),
  );
}

/** One thumbnail button per turn, then one for the final state; `show` gets its position. */
function timeline(
  episode: EpisodeRecord,
  style: TagInfo | undefined,
  show: (position: number) => void,
): HTMLElement {
  return h(
    "ol",
    { class: "timeline" },
    [...episode.turns, null].map((turn, i) =>
      h(
        "li",
        {},
        h(
          "button",
          {
            type: "button",
            onclick: () => show(i),
            class: turn && invalidMarks(turn, episode).length ? "invalid" : "",
            title: turn ? `turn ${turn.turn}: reward ${turn.reward_text}` : "final state",
          },
          picture(turn ? turn.state : episode.final_state, style, "", "thumb"),
          h("span", {}, turn ? `${turn.turn}: ${num(turn.reward)}` : "end"),
        ),
      ),
    ),
  );
}

/** The final position: the last state, success and how the episode ended. */
function finalDetail(episode: EpisodeRecord, style: TagInfo | undefined): HTMLElement[] {
  return [
    picture(episode.final_state, style, `final state of env ${episode.env_id}`),
    h(
      "div",
      { class: "facts" },
      h(
        "p",
        {},
        h("strong", { class: episode.success ? "good" : "bad" }, episode.success ? "Success" : "No success"),
        ` · ended by ${episode.end_reason}`,
      ),
      episode.failure ? h("p", { class: "bad" }, `Failure: ${episode.failure}`) : null,
      h("pre", { class: "state-text" }, episode.final_state),
    ),
  ];
}

/** A turn: the state the model saw, its response, the actions and their reward. */
function turnDetail(turn: TurnRecord, episode: EpisodeRecord, style: TagInfo | undefined): HTMLElement[] {
  const parts = responseParts(turn.raw_response);
  const marks = invalidMarks(turn, episode);
  return [
    picture(turn.state, style, `turn ${turn.turn} of env ${episode.env_id}`),
    h(
      "div",
      { class: "facts" },
      marks.length ? h("p", { class: "invalid-mark" }, `Invalid turn: ${marks.join(", ")}`) : null,
      turn.warned
        ? h("p", { class: "muted" }, "The prompt warned that the previous turn had no valid action.")
        : null,
      h("h3", {}, "Think"),
      h("pre", { class: "think" }, parts.think ?? "(none)"),
      h("h3", {}, "Answer"),
      h("pre", { class: "answer" }, parts.answer ?? turn.raw_response),
      h(
        "dl",
        {},
        h("dt", {}, "Parsed"),
        h("dd", {}, turn.parsed.join(", ") || "–"),
        h("dt", {}, "Executed"),
        h("dd", {}, turn.actions.join(", ") || "–"),
        h("dt", {}, "Reward"),
        h("dd", {}, turn.reward_text),
        h("dt", {}, "Actions left"),
        h("dd", {}, String(turn.actions_left)),
        h("dt", {}, "Finish"),
        h("dd", {}, turn.finish_reason),
      ),
      h("details", {}, h("summary", {}, "State text"), h("pre", { class: "state-text" }, turn.state)),
    ),
  ];
}

/** With a token log: every token id, sampled ones (loss mask 1) shaded by their logprob. */
function tokenOverlay(episode: EpisodeRecord): HTMLElement | null {
  const log = episode.tokens;
  if (!log?.ids?.length) return null;
  const spans = log.ids.map((id, i) => {
    const trained = log.loss_mask[i] === 1;
    // null in a file (NaN on the wire): a logprob the engine did not report.
    const logprob = log.logprobs[i];
    const known = typeof logprob === "number" && !Number.isNaN(logprob);
    const p = known ? Math.exp(logprob) : 0;
    return h(
      "span",
      {
        class: trained ? "tok trained" : "tok",
        style: trained ? `--p:${p.toFixed(3)}` : null,
        title: `#${i} id ${id} · mask ${log.loss_mask[i]}${trained ? ` · logprob ${known ? num(logprob) : "not reported"}` : ""}`,
      },
      String(id),
    );
  });
  return h(
    "details",
    { class: "tokens" },
    h("summary", {}, `Tokens (${log.ids.length}; loss mask and logprobs overlaid)`),
    h(
      "p",
      { class: "muted" },
      "Outlined: trained (loss mask 1), darker = more probable. Plain: prompt and inserted ids.",
    ),
    h("div", { class: "token-ids" }, spans),
  );
}

/** Buttons that save the batch as a self-contained HTML page or an SVG image strip. */
export function exportButtons(
  name: string,
  batch: () => ExportBatch,
  tags: Map<string, TagInfo>,
): HTMLElement {
  const save = async (kind: "html" | "svg") => {
    // The exporter is loaded only when asked for.
    const { exportHtml, exportSvg } = await import("./export.ts");
    const styleOf = (tag: string) => tags.get(tag);
    const text = kind === "html" ? exportHtml(batch(), styleOf) : exportSvg(batch(), styleOf);
    const type = kind === "html" ? "text/html" : "image/svg+xml";
    const url = URL.createObjectURL(new Blob([text], { type }));
    h("a", { href: url, download: `${name}.${kind}` }).click();
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
  };
  return h(
    "span",
    { class: "export" },
    h("button", { type: "button", onclick: () => void save("html") }, "Export HTML"),
    h("button", { type: "button", onclick: () => void save("svg") }, "Export SVG strip"),
  );
}
