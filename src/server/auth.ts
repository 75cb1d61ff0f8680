// Bearer-token check at the HTTP upgrade, before any work: header first, query parameter for
// browsers. Compared as SHA-256 digests with timingSafeEqual, so time leaks neither content
// nor length.
import { createHash, timingSafeEqual } from "node:crypto";
import type { IncomingMessage } from "node:http";

function digest(text: string): Buffer {
  return createHash("sha256").update(text, "utf8").digest();
}

export function tokenOf(request: IncomingMessage): string | null {
  const header = request.headers.authorization;
  if (typeof header === "string") {
    const match = /^Bearer\s+(.+)$/i.exec(header.trim());
    return match ? match[1] : null;
  }
  const url = new URL(request.url ?? "/", "http://localhost");
  return url.searchParams.get("token");
}

/** Whether the request may connect: always when the server has no token. */
export function authorized(request: IncomingMessage, expected: string | null): boolean {
  if (expected === null) return true;
  const given = tokenOf(request);
  // Compare even when nothing was given, so a missing token costs the same as a wrong one.
  return timingSafeEqual(digest(given ?? ""), digest(expected)) && given !== null;
}
