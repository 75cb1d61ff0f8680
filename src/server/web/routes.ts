// The web page's routes: the page itself at `/` (static, no secrets), and the JSON routes it
// uses besides the WebSocket protocol: Play (`/v1/envs/:tag/play`), episode files for Replay
// (shared directory listing, uploads) and a little server info. The JSON routes sit behind the
// same token as the WebSocket (header, or `?token=` as browsers use).
import type { FastifyInstance } from "fastify";
import { MAX_SEED } from "../../../protocol/settings.ts";
import { httpRefusal } from "../../errors/boundary.ts";
import { RollgymError } from "../../errors/catalogue.ts";
import { authorized } from "../auth.ts";
import type { ServerState } from "../state.ts";
import { DEFAULT_FILE_LIMITS, type FileLimits, listShared, openShared, UploadStore } from "./files.ts";
import { play } from "./play.ts";
import { loadStaticFiles } from "./static.ts";

export interface WebOptions {
  /** Directory whose episode files Replay lists; null shares none. */
  share: string | null;
  files: FileLimits;
}

export function webOptions(share: string | null = null, files: Partial<FileLimits> = {}): WebOptions {
  return { share, files: { ...DEFAULT_FILE_LIMITS, ...files } };
}

export function registerWeb(app: FastifyInstance, state: ServerState, options: WebOptions): void {
  const uploads = new UploadStore(options.files);

  for (const [path, file] of loadStaticFiles()) {
    app.get(path, async (_request, reply) => {
      reply.header("content-type", file.type);
      reply.header("cache-control", "no-cache");
      return reply.send(file.body);
    });
  }

  // The JSON routes: each throws a RollgymError with an HTTP status for what it turns down.
  app.register(async (api) => {
    api.setErrorHandler((error, request, reply) => {
      // A refused upload's body is not read: the connection closes instead.
      if (request.method === "POST") reply.header("connection", "close");
      const refused = httpRefusal(error);
      return refused ? reply.code(refused.status).send(refused.body) : reply.send(error);
    });
    // Before the body is read: a request without the token costs no memory.
    api.addHook("onRequest", async (request) => {
      if (!authorized(request.raw, state.options.token))
        throw new RollgymError("unauthorized", { query: true });
    });

    api.get("/v1/web", async () => ({
      version: state.version,
      policy: state.policy.name,
      share: options.share !== null,
      limits: { ...options.files },
    }));

    api.get<{ Params: { tag: string }; Querystring: Record<string, string | undefined> }>(
      "/v1/envs/:tag/play",
      async (request) => {
        const q = request.query;
        const seed = Number(q.seed ?? "0");
        if (!/^\d+$/.test(q.seed ?? "0") || seed > MAX_SEED)
          throw new RollgymError(
            "bad_request",
            { message: `seed: got ${JSON.stringify(q.seed)}, expected an integer in [0, ${MAX_SEED}]` },
            "seed",
          );
        const actions = q.actions ? q.actions.split(",") : [];
        const { enable_think: think, action_sep: actionSep } = state.config.agent_proxy;
        return play(
          state.registry,
          { tag: request.params.tag, seed, actions, solve: q.solve === "1" },
          { think, actionSep },
        );
      },
    );

    api.get("/v1/episode-files", async () => ({
      shared: options.share !== null,
      files: options.share === null ? [] : await listShared(options.share, options.files),
    }));

    api.get<{ Params: { name: string } }>("/v1/episode-files/shared/:name", async (request, reply) => {
      if (options.share === null)
        throw new RollgymError("not_found", {
          message: "this server shares no directory (rollgym serve --share DIR)",
        });
      const stream = await openShared(options.share, request.params.name, options.files);
      return reply.header("content-type", NDJSON).send(stream);
    });

    api.get<{ Params: { id: string } }>("/v1/episode-files/uploads/:id", async (request, reply) => {
      const text = uploads.get(request.params.id);
      if (!text)
        throw new RollgymError("not_found", {
          message: "no such upload (uploads are kept in memory and the oldest are evicted)",
        });
      return reply.header("content-type", NDJSON).send(text);
    });

    // Uploads: episode files as text, kept in memory only (never written to disk).
    api.register(async (scope) => {
      // Bodies being read at once are capped, so uploads hold at most this many × the size limit.
      let reading = 0;
      scope.addHook("onRequest", async (_request, reply) => {
        if (reading >= options.files.maxConcurrentUploads)
          throw new RollgymError("unavailable", {
            message: `max_concurrent_uploads is ${options.files.maxConcurrentUploads}; try again when an upload has finished`,
          });
        reading++;
        reply.raw.once("close", () => reading--);
      });
      scope.removeAllContentTypeParsers();
      scope.addContentTypeParser(
        "*",
        { parseAs: "buffer", bodyLimit: options.files.maxUploadBytes },
        (_r, body, done) => done(null, body),
      );
      scope.post("/v1/episode-files", async (request) => {
        if (!Buffer.isBuffer(request.body))
          throw new RollgymError("bad_request", { message: "send the episode file as the request body" });
        return uploads.add(request.body);
      });
    });
  });
}

const NDJSON = "application/x-ndjson; charset=utf-8";
