// CPU per frame (issue 19.7): a client frame may not hold a map of more keys than any message
// needs, refused at the map's header before a key is decoded, so a 1 MiB map of 90,000 keys
// costs no more than any other frame of its size; the connection that sent it is closed (1002).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeFrame, encodeMessage, MAX_CLIENT_MAP_KEYS } from "../../protocol/codec.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { TestClient } from "../helpers/ws-client.ts";

const wide = (keys: number) =>
  encodeMessage({
    type: "credit",
    groups: 1,
    ...Object.fromEntries(Array.from({ length: keys }, (_, i) => [`k${i}`, i])),
  });

let server: RollgymServer;
let url: string;
beforeAll(async () => {
  server = await buildServer();
  url = await server.listen(0);
});
afterAll(async () => {
  await server.shutdown();
});

describe("maps in client frames", () => {
  it(`decode up to ${MAX_CLIENT_MAP_KEYS} keys from a client; any number elsewhere`, () => {
    expect(() => decodeFrame(wide(MAX_CLIENT_MAP_KEYS - 2), "client")).not.toThrow();
    expect(() => decodeFrame(wide(90_000), "client")).toThrow(/undecodable frame: .*[Mm]ax length/);
    expect(() => decodeFrame(wide(90_000))).not.toThrow();
  });

  it("a 90,000-key map closes its own connection with 1002; others carry on", async () => {
    const hostile = await TestClient.connect(url);
    const bystander = await TestClient.connect(url);
    hostile.ws.send(wide(90_000));
    await hostile.closed();
    expect(hostile.closeCode).toBe(1002);
    bystander.send({ type: "env_open", id: "b", tag: "Bandit", groups: 1, group_size: 1 });
    expect(await bystander.next((f) => f.id === "b")).toMatchObject({ type: "env_opened" });
    bystander.close();
  });
});
