// Headers every response carries so that a browser treats the server's answers as what they
// are: no content sniffing (an episode file served as NDJSON never becomes a page), no reads
// from other sites' no-cors requests, and on the page a Content-Security-Policy that runs only
// the page's own scripts (a crafted episode file's markup, were it ever interpolated, runs
// nothing) and lets only the page's own origin and --allow-origin origins frame it.
import { createHash } from "node:crypto";
import type { FastifyInstance } from "fastify";
import type { OriginPolicy } from "./origin.ts";

/** The hashes CSP needs for a page's inline scripts (the page has one: its import map). */
function inlineScriptHashes(html: string): string[] {
  return [...html.matchAll(/<script(?![^>]*\bsrc=)[^>]*>([\s\S]*?)<\/script>/g)].map(
    (m) => `'sha256-${createHash("sha256").update(m[1], "utf8").digest("base64")}'`,
  );
}

/** The page's policy: its own scripts, styles, images and connections (the WebSocket too). */
export function pageCsp(html: string, frameAncestors: readonly string[]): string {
  return [
    "default-src 'self'",
    `script-src 'self' ${inlineScriptHashes(html).join(" ")}`.trim(),
    "style-src 'self'",
    "img-src 'self' data: blob:",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    `frame-ancestors ${["'self'", ...frameAncestors].join(" ")}`,
  ].join("; ");
}

export function securityHeaders(app: FastifyInstance, origins: OriginPolicy): void {
  const policies = new Map<string, string>();
  app.addHook("onSend", async (_request, reply, payload) => {
    reply.header("x-content-type-options", "nosniff");
    reply.header("cross-origin-resource-policy", "same-origin");
    reply.header("referrer-policy", "no-referrer");
    const type = String(reply.getHeader("content-type") ?? "");
    if (type.startsWith("text/html")) {
      const html = Buffer.isBuffer(payload) ? payload.toString("utf8") : String(payload ?? "");
      let policy = policies.get(html);
      if (policy === undefined) {
        policy = pageCsp(html, origins.allowedOrigins);
        policies.set(html, policy);
      }
      reply.header("content-security-policy", policy);
    }
    return payload;
  });
}
