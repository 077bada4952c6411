// The peer API over mutual TLS (issue 22, "TLS between hosts"): two `herd run` processes with
// `cluster.tls` and their own peer listeners (`cluster.listen`) form one peers cluster; a request
// entering a is served by b's worker through b's peer API over https; the frontend listener no
// longer serves the peer API; a caller with the token but a certificate the CA did not sign (or no
// certificate) is refused at the handshake; and a third node with an untrusted certificate never
// joins. Certificates are made in the test with openssl.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { X509Certificate } from "node:crypto";
import { cleanup, portBase, startHerd, tempDir, waitFor as waitForLog, type HerdProc } from "../helpers/herd.ts";
import { peer } from "../helpers/peers.ts";
import { makePki, type CertFiles } from "../helpers/pki.ts";

const TOKEN = "e2e-tls-token";
let dir = "";
let base = 0;
let pki: ReturnType<typeof makePki>;
const nodes = new Map<string, HerdProc>();
const front = (i: number) => base + i;
const peerPort = (i: number) => base + 10 + i;
const seeds = () => [0, 1].map((i) => `127.0.0.1:${peerPort(i)}`);
const logs = () => [...nodes].map(([n, h]) => `--- ${n} ---\n${h.log().slice(-2500)}`).join("\n");
const waitFor = <T>(what: string, fn: () => Promise<T | null | undefined | false>, timeoutMs = 30_000) => waitForLog(what, fn, timeoutMs, logs);
const admin = async (i: number): Promise<any> => (await fetch(`http://127.0.0.1:${front(i)}/admin/cluster`, { signal: AbortSignal.timeout(2000) })).json();

function config(name: string, i: number, certs: CertFiles): string {
  return `node: { name: ${name}, data_dir: ${JSON.stringify(join(dir, name, "data"))} }
frontend: { first_token_timeout_ms: 10000 }
supervisor: { port_range_start: ${base + 100 + 100 * i}, health_interval_ms: 100 }
models: [{ name: m-${name} }]
engines: [{ kind: sim, model: m-${name}, count: 1, args: ["--time-scale", "10"] }]
cluster:
  discovery: peers
  token: ${TOKEN}
  listen: 127.0.0.1:${peerPort(i)}
  tls: { cert: ${certs.cert}, key: ${certs.key}, ca: ${pki.ca} }
  peers: { seeds: ${JSON.stringify(seeds())} }
`;
}

async function start(name: string, i: number, certs: CertFiles): Promise<HerdProc> {
  mkdirSync(join(dir, name), { recursive: true });
  const h = await startHerd(join(dir, name), config(name, i, certs), { args: ["--listen", `127.0.0.1:${front(i)}`], readyTimeoutMs: 40_000 });
  nodes.set(name, h);
  return h;
}

const pem = (f: string) => readFileSync(f, "utf8");
const view = (tls: Record<string, string>) =>
  fetch(`https://127.0.0.1:${peerPort(1)}/cluster/v1/view`, { headers: { authorization: `Bearer ${TOKEN}` }, tls, signal: AbortSignal.timeout(3000) } as RequestInit);

describe.skipIf(!peer("openssl", ["openssl", "version"]))("cluster peer API over mutual TLS", () => {
  beforeAll(async () => {
    dir = tempDir("herd-cluster-tls-");
    base = portBase();
    mkdirSync(join(dir, "pki"));
    pki = makePki(join(dir, "pki"), ["a", "b"]);
    await Promise.all([start("a", 0, pki.nodes.a!), start("b", 1, pki.nodes.b!)]);
    for (const i of [0, 1]) await waitFor(`node ${i} pools both workers`, async () => ((await admin(i)).workers.filter((w: any) => w.state === "ready").length === 2 ? true : null));
  }, 90_000);
  afterAll(async () => {
    await Promise.all([...nodes.values()].map((h) => h.stop(5_000)));
    if (dir) cleanup(dir);
  });

  test("a request entering a is served by b's worker through b's https peer API", async () => {
    const w = (await admin(0)).workers.find((x: any) => x.model === "m-b");
    expect(w.node).toBe("b");
    expect(w.url).toBe(`https://127.0.0.1:${peerPort(1)}`);
    const r = await fetch(`http://127.0.0.1:${front(0)}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "m-b", messages: [{ role: "user", content: "over mutual TLS" }], max_tokens: 8 }),
    });
    expect(r.status).toBe(200);
    expect(r.headers.get("x-herd-worker")!.startsWith("b/")).toBe(true);
    expect(((await r.json()) as any).choices[0].message.content.length).toBeGreaterThan(0);
  }, 30_000);

  test("the frontend listener does not serve the peer API; the peer listener needs a CA-signed client certificate", async () => {
    expect((await fetch(`http://127.0.0.1:${front(1)}/cluster/v1/view`, { headers: { authorization: `Bearer ${TOKEN}` } })).status).toBe(404);
    const ok = await view({ cert: pem(pki.nodes.a!.cert), key: pem(pki.nodes.a!.key), ca: pem(pki.ca) });
    expect(ok.status).toBe(200);
    expect(((await ok.json()) as any).nodes.map((n: any) => n.name).sort()).toEqual(["a", "b"]);
    await expect(view({ cert: pem(pki.untrusted.cert), key: pem(pki.untrusted.key), ca: pem(pki.ca) })).rejects.toThrow();
    await expect(view({ ca: pem(pki.ca) })).rejects.toThrow();
    // and plain HTTP on the TLS port gets nothing
    const plain = await fetch(`http://127.0.0.1:${peerPort(1)}/cluster/v1/view`, { signal: AbortSignal.timeout(3000) }).then((r) => r.status, () => 0);
    expect(plain).not.toBe(200);
  }, 30_000);

  test("/metrics carries the peer certificate's notAfter (issue 23: the expiry alert)", async () => {
    const text = await (await fetch(`http://127.0.0.1:${front(0)}/metrics`)).text();
    const m = /^herd_tls_cert_expiry_timestamp_seconds\{listener="peer"\} (\S+)$/m.exec(text);
    expect(m).not.toBeNull();
    expect(Number(m![1])).toBe(Date.parse(new X509Certificate(pem(pki.nodes.a!.cert)).validTo) / 1000);
    expect(text).not.toContain('listener="frontend"'); // no frontend.tls
  });

  test("a node with an untrusted certificate (and the right token) never joins", async () => {
    const evil = await start("evil", 2, pki.untrusted);
    await Bun.sleep(3000); // several heartbeats
    for (const i of [0, 1]) expect((await admin(i)).nodes.map((n: any) => n.name).sort()).toEqual(["a", "b"]);
    expect((await admin(2)).nodes.map((n: any) => n.name)).toEqual(["evil"]);
    await evil.stop(5_000);
    nodes.delete("evil");
  }, 60_000);
});
