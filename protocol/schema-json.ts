// The wire schemas as one JSON Schema document (protocol/schema.json), generated from the
// TypeBox schemas that also validate frames and type the code, so the docs cannot drift.
// Regenerate: node protocol/schema-json.ts > protocol/schema.json (a test checks it is current).
import { CLIENT_MESSAGE_SCHEMAS, SERVER_MESSAGE_SCHEMAS } from "./messages.ts";
import { PROTOCOL_VERSION } from "./version.ts";

export function protocolJsonSchema(): string {
  const document = {
    $schema: "https://json-schema.org/draft/2020-12/schema",
    title: `rollgym wire protocol ${PROTOCOL_VERSION}`,
    description:
      "One msgpack map per binary WebSocket frame; see PROTOCOL.md. Generated from protocol/messages.ts.",
    client_to_server: CLIENT_MESSAGE_SCHEMAS,
    server_to_client: SERVER_MESSAGE_SCHEMAS,
  };
  return `${JSON.stringify(document, null, 2)}\n`;
}

if (import.meta.main) process.stdout.write(protocolJsonSchema());
