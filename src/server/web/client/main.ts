/// <reference lib="dom" />
// The page's entry: the header, the token form when the server wants one, and the view the
// URL names, each view loaded only when first opened.
import { api, h, RouteError, route, setToken, token } from "./api.ts";
import { PICTURE_CSS } from "./picture.ts";

interface View {
  mount(root: HTMLElement, params: URLSearchParams): () => void;
}

const VIEWS: Record<string, () => Promise<View>> = {
  play: () => import("./play-view.ts"),
  watch: () => import("./watch-view.ts"),
  replay: () => import("./replay.ts"),
};

const root = document.getElementById("view")!;
let unmount: (() => void) | null = null;
let shown = "";

async function render(): Promise<void> {
  const { view, params } = route();
  const name = view in VIEWS ? view : "play";
  for (const link of document.querySelectorAll<HTMLAnchorElement>("nav a"))
    link.toggleAttribute("aria-current", link.dataset.view === name);
  // Links within a view change only its parameters; the view follows them itself.
  if (name === shown && unmount) return;
  unmount?.();
  unmount = null;
  shown = name;
  root.replaceChildren();
  const module = await VIEWS[name]();
  if (shown !== name) return;
  unmount = module.mount(root, params);
}

function askToken(message: string): void {
  const input = h("input", { type: "password", "aria-label": "Server token", placeholder: "token" });
  const form = h(
    "form",
    {
      class: "token",
      onsubmit: (event: Event) => {
        event.preventDefault();
        setToken(input.value);
        location.reload();
      },
    },
    h("label", {}, message, " ", input),
    h("button", { type: "submit" }, "Use token"),
  );
  root.replaceChildren(form);
  input.focus();
}

async function start(): Promise<void> {
  // A constructed sheet, not a <style> element: the page's CSP runs no inline styles.
  const sheet = new CSSStyleSheet();
  sheet.replaceSync(PICTURE_CSS);
  document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
  token();
  try {
    const info = await api<{ version: string; policy: string }>("/v1/web");
    document.getElementById("server")!.textContent = `v${info.version} · policy: ${info.policy}`;
  } catch (error) {
    if (error instanceof RouteError && error.status === 401) return askToken("This server needs a token.");
    throw error;
  }
  window.addEventListener("hashchange", () => void render());
  await render();
}

void start();
