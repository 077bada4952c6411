// The RESP server's remote lookup (peer fetch, issue 14): GET/EXISTS misses are looked up remotely,
// in parallel for a pipelined run and once per key across clients; replies keep their order; other
// clients are not blocked; over the in-flight bound, or when the source finds nothing, it is a plain
// miss ($-1 / :0), never an error.
import { afterEach, describe, expect, test } from "bun:test";
import { RespServer, type RemoteTierSource } from "../../src/tier/resp/server.ts";
import { MapStore } from "../helpers/map-store.ts";
import { cmd, transcript } from "./resp-helpers.ts";

/** A remote tier whose answers the test releases by hand; a found key is stored locally, as PeerFetcher does. */
function gatedRemote(store: MapStore, remote: Map<string, Uint8Array>) {
  const gates: (() => void)[] = [];
  const source: RemoteTierSource & { asked: string[] } = {
    asked: [],
    available: () => true,
    get(key) {
      source.asked.push(key);
      return new Promise((resolve) =>
        gates.push(() => {
          const v = remote.get(key) ?? null;
          if (v) store.put(key, v);
          resolve(v);
        }),
      );
    },
  };
  return { source, release: () => gates.splice(0).forEach((g) => g()), pending: () => gates.length };
}

let server: RespServer | undefined;
afterEach(() => server?.stop());

function start(store: MapStore, remote: RemoteTierSource, remoteMax?: number): number {
  server = new RespServer({ host: "127.0.0.1", port: 0, store, remote, ...(remoteMax ? { remoteMax } : {}) });
  server.start();
  return server.port;
}

const until = async (what: () => boolean) => {
  for (let i = 0; i < 400 && !what(); i++) await Bun.sleep(5);
  expect(what()).toBe(true);
};

describe("RESP server with a remote source", () => {
  test("a local miss is fetched; a key nobody has is nil; replies stay in order; other clients are not blocked", async () => {
    const store = new MapStore();
    store.put("local", new TextEncoder().encode("L"));
    const g = gatedRemote(store, new Map([["far", new TextEncoder().encode("remote-bytes")]]));
    const port = start(store, g.source);
    const waiting = transcript(port, Buffer.concat([cmd("GET", "far"), cmd("GET", "nobody"), cmd("GET", "local"), cmd("EXISTS", "far", "local", "nobody"), cmd("PING")]), (b) => b.toString().endsWith("+PONG\r\n"));
    await until(() => g.pending() === 2); // far and nobody asked at once; EXISTS joins those lookups
    // Another client runs while the first one waits, and joins the pending lookup of `far`.
    const other = await transcript(port, Buffer.concat([cmd("GET", "local"), cmd("PING")]), (b) => b.toString().endsWith("+PONG\r\n"));
    expect(other.bytes.toString()).toBe("$1\r\nL\r\n+PONG\r\n");
    const joined = transcript(port, cmd("GET", "far"), (b) => b.toString().endsWith("remote-bytes\r\n"));
    await until(() => server!.stats.commands === 8); // its GET has run...
    expect(g.pending()).toBe(2); // ...and joined the lookup in flight
    g.release();
    const r = await waiting;
    expect(r.bytes.toString()).toBe("$12\r\nremote-bytes\r\n$-1\r\n$1\r\nL\r\n:2\r\n+PONG\r\n");
    expect((await joined).bytes.toString()).toBe("$12\r\nremote-bytes\r\n");
    expect(g.source.asked).toEqual(["far", "nobody"]);
    expect(server!.stats).toMatchObject({ remote_lookups: 2, remote_hits: 1, remote_misses: 1, remote_rejected: 0 });
    expect(store.get("far")).toEqual(new TextEncoder().encode("remote-bytes")); // the next read is local
  });

  test("a reply behind a pending lookup waits for it, QUIT included; unauthenticated clients get NOAUTH, not a lookup", async () => {
    const store = new MapStore();
    const g = gatedRemote(store, new Map());
    server = new RespServer({ host: "127.0.0.1", port: 0, store, remote: g.source, password: "pw" });
    server.start();
    const noauth = await transcript(server.port, cmd("GET", "x"), (b) => b.length > 0);
    expect(noauth.bytes.toString()).toBe("-NOAUTH Authentication required.\r\n");
    const r = transcript(server.port, Buffer.concat([cmd("AUTH", "pw"), cmd("GET", "x"), cmd("SET", "y", "1"), cmd("QUIT"), cmd("PING")]));
    await until(() => g.pending() === 1);
    g.release();
    const out = await r;
    expect(out.bytes.toString()).toBe("+OK\r\n$-1\r\n+OK\r\n+OK\r\n");
    expect(out.closed).toBe(true);
    expect(g.source.asked).toEqual(["x"]);
  });

  test("over the in-flight bound a miss is answered at once as a miss", async () => {
    const store = new MapStore();
    const g = gatedRemote(store, new Map([["far", new Uint8Array([1])]]));
    const port = start(store, g.source, 1);
    const first = transcript(port, cmd("GET", "far"), (b) => b.length >= 7);
    await until(() => g.pending() === 1);
    const second = await transcript(port, cmd("GET", "far2"), (b) => b.length >= 5);
    expect(second.bytes.toString()).toBe("$-1\r\n");
    expect(server!.stats.remote_rejected).toBe(1);
    g.release();
    expect((await first).bytes).toEqual(Buffer.from("$1\r\n\x01\r\n", "latin1"));
  });

  test("without anyone to ask the command runs synchronously, as without a source", async () => {
    const store = new MapStore();
    const port = start(store, { available: () => false, get: () => Promise.reject(new Error("must not be called")) });
    const r = await transcript(port, Buffer.concat([cmd("GET", "x"), cmd("EXISTS", "x")]), (b) => b.toString().endsWith(":0\r\n"));
    expect(r.bytes.toString()).toBe("$-1\r\n:0\r\n");
    expect(server!.stats.remote_lookups).toBe(0);
  });
});
