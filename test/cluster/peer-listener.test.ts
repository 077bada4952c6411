// The peer API's own listener (cluster.listen): it serves the handler given, with the caller's IP,
// and a malformed Host is a 400 there too (issue 22, row 11), never a 500.
import { expect, test } from "bun:test";
import { connect } from "node:net";
import { startPeerListener } from "../../src/cluster/peer-listener.ts";

function raw(port: number, text: string): Promise<string> {
  return new Promise((resolve) => {
    const c = connect(port, "127.0.0.1", () => c.write(text));
    let buf = "";
    c.on("data", (d) => (buf += d));
    c.on("close", () => resolve(buf));
    setTimeout(() => (c.destroy(), resolve(buf)), 2000);
  });
}

test("serves the handler with the caller's IP; a malformed Host is a 400", async () => {
  const seen: (string | null)[] = [];
  const l = startPeerListener({ listen: "127.0.0.1:0", tls: null, handle: (_req, env) => (seen.push(env.ip), Response.json({ ok: true })) });
  try {
    const r = await fetch(`http://127.0.0.1:${l.port}/cluster/v1/view`);
    expect(r.status).toBe(200);
    expect(seen).toEqual(["127.0.0.1"]);
    const bad = await raw(l.port, "GET /cluster/v1/view HTTP/1.1\r\nHost: a b\r\nConnection: close\r\n\r\n");
    expect(bad.split(" ")[1]).toBe("400");
    expect(bad).toContain("invalid_host");
    expect(seen).toHaveLength(1);
  } finally {
    await l.stop();
  }
  expect(() => startPeerListener({ listen: "nonsense", tls: null, handle: () => new Response() })).toThrow(/cluster.listen: expected HOST:PORT/);
});
