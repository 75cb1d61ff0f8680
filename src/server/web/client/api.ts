/// <reference lib="dom" />
// What the page's views share: the token, JSON requests, the env catalogue, the view state in
// the URL (so a view can be shared), and a small element builder.

export { num } from "./records.ts";

const TOKEN_KEY = "rollgym.token";

/**
 * The server's token: taken from `?token=` once (and removed from the address, so a shared
 * view's URL never carries it), then from this tab's session storage.
 */
export function token(): string | null {
  const search = new URLSearchParams(location.search);
  const fromUrl = search.get("token");
  if (fromUrl) {
    sessionStorage.setItem(TOKEN_KEY, fromUrl);
    search.delete("token");
    const rest = search.toString();
    history.replaceState(null, "", `${location.pathname}${rest ? `?${rest}` : ""}${location.hash}`);
  }
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value: string): void {
  sessionStorage.setItem(TOKEN_KEY, value);
}

/** A JSON route the server refused: its HTTP status and message (errors/catalogue.ts on the server). */
export class RouteError extends Error {
  readonly status: number;
  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}

/** A JSON route of the server, with the token; errors carry the server's message. */
export async function api<T>(path: string, init: RequestInit = {}): Promise<T> {
  const headers = new Headers(init.headers);
  const t = token();
  if (t) headers.set("authorization", `Bearer ${t}`);
  const response = await fetch(path, { ...init, headers });
  const text = await response.text();
  if (!response.ok) {
    let message = response.statusText;
    try {
      message = JSON.parse(text).error?.message ?? JSON.parse(text).message ?? message;
    } catch {}
    throw new RouteError(response.status, message);
  }
  return (
    response.headers.get("content-type")?.startsWith("application/json") ? JSON.parse(text) : text
  ) as T;
}

export interface TagInfo {
  tag: string;
  env_type: string;
  max_actions_per_traj: number;
  config: { grid_lookup?: Record<string, string>; action_lookup?: Record<string, string> } & Record<
    string,
    unknown
  >;
}

let catalogue: Promise<Map<string, TagInfo>> | null = null;

/** The server's tags (GET /v1/envs), fetched once. */
export function envs(): Promise<Map<string, TagInfo>> {
  catalogue ??= api<{ envs: TagInfo[] }>("/v1/envs").then((r) => new Map(r.envs.map((e) => [e.tag, e])));
  return catalogue;
}

/** The view named in the URL's hash (`#/play?tag=…`) and its parameters. */
export function route(): { view: string; params: URLSearchParams } {
  const [path, query = ""] = location.hash.replace(/^#\/?/, "").split("?");
  return { view: path || "play", params: new URLSearchParams(query) };
}

/** Record the view's state in the URL without reloading it. */
export function setParams(values: Record<string, string | number | null | undefined>): void {
  const { view, params } = route();
  for (const [key, value] of Object.entries(values)) {
    if (value === null || value === undefined || value === "") params.delete(key);
    else params.set(key, String(value));
  }
  const query = params.toString();
  history.replaceState(
    null,
    "",
    `${location.pathname}${location.search}#/${view}${query ? `?${query}` : ""}`,
  );
}

export type Child = Node | string | number | null | undefined | false | Child[];

// Set as properties rather than attributes, so they reflect the live state.
const PROPERTIES = new Set(["value", "checked", "disabled", "selected", "open", "textContent"]);

/** `h("button", {class: "x", onclick: f}, "label")`. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Record<string, unknown> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function")
      element.addEventListener(key.slice(2), value as EventListener);
    else if (PROPERTIES.has(key)) (element as unknown as Record<string, unknown>)[key] = value;
    // Through the CSSOM: the page's CSP refuses style attributes.
    else if (key === "style") element.style.cssText = String(value);
    else element.setAttribute(key, value === true ? "" : String(value));
  }
  append(element, children);
  return element;
}

export function append(parent: Element, children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(parent, child);
    else parent.append(typeof child === "number" ? String(child) : child);
  }
}

/** An element holding markup the page made itself (the SVG pictures and charts). */
export function markup(html: string, className = ""): HTMLElement {
  const holder = h("div", { class: className });
  holder.innerHTML = html;
  return holder;
}

/** Whether a key press belongs to a form field rather than to the page's shortcuts. */
export function typing(event: KeyboardEvent): boolean {
  const target = event.target as HTMLElement | null;
  return (
    event.ctrlKey ||
    event.metaKey ||
    event.altKey ||
    (target !== null &&
      /^(INPUT|SELECT|TEXTAREA)$/.test(target.tagName) &&
      (target as HTMLInputElement).type !== "range")
  );
}

/**
 * Scrolls `element` to the top of the viewport unless its top already shows in the upper part
 * of it: on a phone the episode panel stacks below the list, out of sight of the tapped chip.
 */
export function bringIntoView(element: HTMLElement): void {
  const { top } = element.getBoundingClientRect();
  // A scroll may leave it a fraction of a pixel above the top.
  if (top < -1 || top > window.innerHeight * 0.75) element.scrollIntoView({ block: "start" });
}
