// A route of the mock engine as server.ts wires it: its methods, whether it reads a JSON body,
// and its handler. Each module under routes/ answers one family of vLLM's routes.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Headers } from "../http.ts";
import type { JsonObject } from "../validate.ts";

export interface RouteRequest {
  req: IncomingMessage;
  res: ServerResponse;
  url: URL;
  /** The JSON body (Content-Type checked) of a `json` route; {} for the others. */
  body: JsonObject;
  /** The client's x-request-id, echoed by the routes that read no body (and by errors). */
  echo: Headers;
}

export interface Route {
  methods: readonly string[];
  json?: boolean;
  handle(request: RouteRequest): void | Promise<void>;
}

/** Path → route. */
export type Routes = Record<string, Route>;
