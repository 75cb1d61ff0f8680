// URLs as logs, messages and pages show them: a token never appears, wherever a URL carries one
// (the page's and the API's `?token=`, OpenEnv's /t/TOKEN path form, a user:password@ prefix).

/** `url` (absolute, or a path with its query) with every token and password replaced by [redacted]. */
export function withoutSecrets(url: string): string {
  return url
    .replace(/\/t\/[^/?#]*/g, "/t/[redacted]")
    .replace(/([?&]token=)[^&#]*/gi, "$1[redacted]")
    .replace(/^([a-z][a-z0-9+.-]*:\/\/)[^/?#@]*@/i, "$1[redacted]@");
}
