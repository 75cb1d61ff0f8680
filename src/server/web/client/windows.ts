/// <reference lib="dom" />
// An endless stream in Watch: its groups come in windows, each judged by the filter in a
// `watch_window` frame that also names the weight version in force. The page keeps the last
// KEPT_WINDOWS windows and their groups only (plus the groups of windows still playing), so a
// stream that never ends holds a bounded amount of the browser's memory.
import { h } from "./api.ts";
import type { Frame } from "./protocol.ts";
import { type GroupView, turnVersions, type Verdict } from "./records.ts";

/** Windows kept per endless stream; older ones, and their groups, are let go. */
export const KEPT_WINDOWS = 8;
/** Windows not yet judged whose groups are kept too (beyond that, a lost window frame's groups go). */
export const PLAYING_WINDOWS = 4;

export interface WindowView {
  window: number;
  first: number;
  groups: number;
  kept: number;
  dropped: number;
  failed: number;
  /** Finished but not sent: older than the stream's drop_older_than. */
  stale: number;
  /** The version in force when the verdict was made. */
  version: { label: string; ordinal: number };
  /** The youngest and oldest of its groups' ages; null when none played a turn (or none was seen). */
  ages: { min: number; max: number } | null;
}

export interface EndlessView {
  /** Groups per window (the tags' groups). */
  perWindow: number;
  /** The last windows judged, by window number; at most KEPT_WINDOWS. */
  windows: WindowView[];
  /** Windows judged and groups seen since this page began watching the stream. */
  judged: number;
  seen: number;
}

export function endlessView(perWindow: number): EndlessView {
  return { perWindow: Math.max(perWindow, 1), windows: [], judged: 0, seen: 0 };
}

/** A finished group of the stream: pending until its window's verdict. */
export function addEndlessGroup(e: EndlessView, groups: Map<number, GroupView>, group: GroupView): void {
  groups.set(group.group, { ...group, versions: turnVersions(group.episodes), age: null });
  e.seen++;
  forget(e, groups);
}

/** A `watch_window` frame: its groups' verdicts and ages, and the window at the top of the list. */
export function judgeWindow(e: EndlessView, groups: Map<number, GroupView>, frame: Frame): void {
  const version = frame.version as { label: string; ordinal: number };
  const lists: [number[] | undefined, Verdict][] = [
    [frame.kept as number[], "kept"],
    [frame.dropped as number[], "dropped"],
    [frame.stale_dropped as number[] | undefined, "dropped"],
    [frame.failed_groups as number[], "failed"],
  ];
  const ages: number[] = [];
  for (const [ids, verdict] of lists) {
    for (const id of ids ?? []) {
      const g = groups.get(id);
      if (!g) continue;
      g.verdict = verdict;
      g.age = g.versions ? version.ordinal - g.versions.min : null;
      if (g.age !== null) ages.push(g.age);
    }
  }
  e.windows.push({
    window: frame.window as number,
    first: frame.first as number,
    groups: frame.groups as number,
    kept: (frame.kept as number[]).length,
    dropped: (frame.dropped as number[]).length,
    failed: (frame.failed_groups as number[]).length,
    stale: ((frame.stale_dropped as number[] | undefined) ?? []).length,
    version: { label: version.label, ordinal: version.ordinal },
    ages: ages.length ? { min: Math.min(...ages), max: Math.max(...ages) } : null,
  });
  e.judged++;
  // Verdicts can arrive out of order (a window's last group may finish after the next window's).
  e.windows.sort((a, b) => a.window - b.window);
  if (e.windows.length > KEPT_WINDOWS) e.windows.splice(0, e.windows.length - KEPT_WINDOWS);
  forget(e, groups);
}

/** Lets go of the groups before the oldest kept window, and of the oldest past the bound. */
function forget(e: EndlessView, groups: Map<number, GroupView>): void {
  const oldest = e.windows[0]?.first ?? 0;
  for (const id of groups.keys()) if (id < oldest) groups.delete(id);
  const bound = (KEPT_WINDOWS + PLAYING_WINDOWS) * e.perWindow;
  if (groups.size <= bound) return;
  const ids = [...groups.keys()].sort((a, b) => a - b);
  for (const id of ids.slice(0, ids.length - bound)) groups.delete(id);
}

/** "23 groups · 5 windows" rather than a count out of a total an endless stream never reaches. */
export function endlessProgress(e: EndlessView): string {
  return `${e.seen} groups · ${e.judged} windows`;
}

/** The kept windows, newest first, each with its verdict counts, version and its groups' ages. */
export function windowList(e: EndlessView): HTMLElement {
  const letGo = e.judged - e.windows.length;
  return h(
    "div",
    { class: "windows" },
    h(
      "p",
      { class: "muted" },
      `Windows of ${e.perWindow} groups, newest first: the last ${KEPT_WINDOWS} and their groups are kept` +
        (letGo > 0 ? ` (${letGo} older let go).` : "."),
    ),
    e.windows.length
      ? h("ol", { "aria-label": "Windows" }, [...e.windows].reverse().map(windowItem))
      : h("p", { class: "muted" }, "No window judged yet."),
  );
}

function windowItem(w: WindowView): HTMLElement {
  const ages = w.ages ? (w.ages.min === w.ages.max ? `${w.ages.min}` : `${w.ages.min}–${w.ages.max}`) : "–";
  return h(
    "li",
    { "data-testid": "window", "data-window": w.window },
    h("strong", {}, `Window ${w.window}`),
    ` groups ${w.first}–${w.first + w.groups - 1} · `,
    h("span", { class: "verdict kept" }, `${w.kept} kept`),
    " ",
    h("span", { class: "verdict dropped" }, `${w.dropped} dropped`),
    w.failed ? [" ", h("span", { class: "verdict failed" }, `${w.failed} failed`)] : "",
    w.stale ? ` (${w.stale} too old)` : "",
    ` · version ${w.version.label} (v${w.version.ordinal}) · ages ${ages}`,
  );
}
