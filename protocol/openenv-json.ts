// The OpenEnv declaration (protocol/openenv.ts) as the JSON document the Python provider loads.
// Regenerate: node protocol/openenv-json.ts > python/rollgym_envs/openenv_schema.json (a test
// checks it is current).
import { PREVIEW_CHARS } from "./bounded-json.ts";
import {
  MAX_LISTED_ERRORS,
  OPENENV_CLIENT_MESSAGES,
  OPENENV_ERROR_CODES,
  OPENENV_MODELS,
} from "./openenv.ts";
import { MAX_SEED } from "./settings.ts";

export function openenvJsonSchema(): string {
  const document = {
    $comment:
      "Generated from protocol/openenv.ts: node protocol/openenv-json.ts > python/rollgym_envs/openenv_schema.json",
    max_seed: MAX_SEED,
    max_listed_errors: MAX_LISTED_ERRORS,
    preview_chars: PREVIEW_CHARS,
    error_codes: OPENENV_ERROR_CODES,
    client_messages: OPENENV_CLIENT_MESSAGES,
    models: OPENENV_MODELS,
  };
  return `${JSON.stringify(document, null, 2)}\n`;
}

if (import.meta.main) process.stdout.write(openenvJsonSchema());
