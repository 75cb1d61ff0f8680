// Bearer-token check at the HTTP upgrade, before any work: header first, query parameter for
// browsers; and the trainer token of a hello with role "trainer". Compared as SHA-256 digests
// with timingSafeEqual, so time leaks neither content nor length.
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
  return expected === null || sameSecret(tokenOf(request), expected);
}

/** Whether `given` is `expected`, in constant time. */
export function sameSecret(given: string | null | undefined, expected: string): boolean {
  // Compare even when nothing was given, so a missing token costs the same as a wrong one.
  return timingSafeEqual(digest(given ?? ""), digest(expected)) && typeof given === "string";
}
