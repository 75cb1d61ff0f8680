// Which browsers may talk to the server. A page from another origin must not open the
// WebSocket or use the HTTP routes (it would run rollouts on the researcher's engine, watch
// them, upload files), and a page that rebinds its own DNS name to this server's address must
// not either: its requests look same-origin to the browser (no Origin on a GET, and no
// Sec-Fetch-* headers either to a plain-http name), but they carry its name in Host.
// So: an Origin must be the page's own or a configured one, a request from another site
// (Sec-Fetch-Site) is refused unless it is a navigation, and the Host must be a name this
// server is known by. On a server with a token, a request without any browser marker (no
// Origin, no Sec-Fetch-Site) skips the Host check: a rebinding page cannot present the token,
// and trainers may reach the server by any name. Without a token, WebSocket handshakes without
// an Origin (trainers: browsers always send one) and /healthz skip it as well.
import type { IncomingMessage } from "node:http";
import { isIP } from "node:net";
import { hostname } from "node:os";

export interface OriginOptions {
  /** Origins (scheme://host[:port]) allowed besides the server's own, e.g. where the page is embedded or proxied. */
  allowOrigins: readonly string[];
  /** Host names the server may be reached by, besides IP addresses, localhost and this machine's name. */
  allowHosts: readonly string[];
}

/** Origins as the browser sends them: scheme, host and a non-default port, lower case. */
export function normalOrigin(value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new RangeError(
      `--allow-origin: ${JSON.stringify(value)} is not an origin (like https://lab.example:8443)`,
    );
  }
  if (!/^https?:$/.test(url.protocol) || url.pathname !== "/" || url.search || url.hash || url.username)
    throw new RangeError(
      `--allow-origin: ${JSON.stringify(value)} is not an origin: expected http(s)://host[:port] and nothing after it`,
    );
  return url.origin;
}

export class OriginPolicy {
  private readonly origins: Set<string>;
  private readonly hosts: Set<string>;

  constructor(options: Partial<OriginOptions> = {}) {
    this.origins = new Set((options.allowOrigins ?? []).map(normalOrigin));
    this.hosts = new Set(
      [
        "localhost",
        hostname(),
        ...(options.allowHosts ?? []),
        ...[...this.origins].map((o) => new URL(o).hostname),
      ].map((h) => h.toLowerCase()),
    );
  }

  /** Also answer browsers by the name the server listens on (`--host NAME`). */
  addHost(name: string): void {
    this.hosts.add(name.toLowerCase());
  }

  /** The origins allowed besides the page's own (for frame-ancestors). */
  get allowedOrigins(): string[] {
    return [...this.origins];
  }

  /**
   * Why a request is refused (HTTP 403), or null when it may go on. `tokenRequired`: the server
   * checks a token, so requests that are not from a browser may use any Host.
   */
  refusal(request: IncomingMessage, tokenRequired: boolean): string | null {
    const origin = header(request, "origin");
    const site = header(request, "sec-fetch-site");
    if (origin === undefined && site === undefined && (tokenRequired || notFromAPage(request))) return null; // not a browser
    const host = header(request, "host") ?? "";
    const hostName = nameOf(host);
    if (hostName === null || !this.hostAllowed(hostName))
      return `Host ${JSON.stringify(host)} is not a name this server is known by (IP addresses, localhost, ${hostname()}); reaching it by another name needs rollgym serve --allow-host NAME (or --allow-origin for a page's origin)`;
    if (origin !== undefined) {
      if (this.originAllowed(origin, host)) return null;
      return `Origin ${JSON.stringify(origin)} may not use this server: only its own page (${host}) and --allow-origin origins may`;
    }
    // No Origin: a same-origin read, a navigation, or a no-cors request from another site
    // (an <img>, a <script>) whose answer that site cannot read; the last is refused anyway.
    if (site === undefined || site === "same-origin" || site === "none") return null;
    const navigation = header(request, "sec-fetch-mode") === "navigate";
    if (navigation && (request.method === "GET" || request.method === "HEAD")) return null;
    return `a request from another site (Sec-Fetch-Site: ${site}) may not use this server`;
  }

  private hostAllowed(name: string): boolean {
    return isIP(name) !== 0 || name.endsWith(".localhost") || this.hosts.has(name);
  }

  private originAllowed(origin: string, host: string): boolean {
    let url: URL;
    try {
      url = new URL(origin);
    } catch {
      return false; // "null" (sandboxed frames, files) and anything unparsable
    }
    if (this.origins.has(url.origin)) return true;
    // The page's own origin: the same host and port as the request was sent to (http, or https
    // when a TLS proxy forwards to us).
    if (url.protocol !== "http:" && url.protocol !== "https:") return false;
    const hostUrl = parseHost(host, url.protocol);
    return hostUrl !== null && hostUrl.host === url.host;
  }
}

/**
 * A request no page can send without an Origin: browsers put one on every WebSocket handshake
 * (RFC 6455), so a trainer's socket without one is not a page's and may use any Host name. A
 * health probe reveals nothing, so monitors may use any name too.
 */
function notFromAPage(request: IncomingMessage): boolean {
  if (header(request, "upgrade")?.toLowerCase() === "websocket") return true;
  const path = (request.url ?? "").split("?")[0];
  return path === "/healthz" && (request.method === "GET" || request.method === "HEAD");
}

function header(request: IncomingMessage, name: string): string | undefined {
  const value = request.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

function parseHost(host: string, protocol: string): URL | null {
  try {
    return new URL(`${protocol}//${host}`);
  } catch {
    return null;
  }
}

/** The host name of a Host header without port or IPv6 brackets, lower case; null if malformed. */
function nameOf(host: string): string | null {
  const url = parseHost(host, "http:");
  if (url === null || url.host !== host.toLowerCase().replace(/:80$/, "")) return null;
  return url.hostname.replace(/^\[(.*)\]$/, "$1");
}
