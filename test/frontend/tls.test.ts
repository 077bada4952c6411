// frontend.tls (issue 22, "optional TLS on the frontend"): the listener of src/frontend/server.ts with
// Bun.serve's tls option — https with the CA answers, a client that does not trust the certificate
// and a plain-HTTP client on the same port are refused; with frontend.tls.ca a client must present
// a certificate that CA signed. Also the config findings (path and line), the permission check of
// the key, the exposure lines and the certificate's notAfter (src/http/tls-files.ts). Certificates
// are made here with openssl (test/helpers/pki.ts); the tests skip without it.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chmodSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { X509Certificate } from "node:crypto";
import { Hono } from "hono";
import { listen, type Listening } from "../../src/frontend/server.ts";
import type { Frontend } from "../../src/frontend/app.ts";
import { certNotAfterS, loadListenerTls, TlsFileError } from "../../src/http/tls-files.ts";
import { parseConfigText } from "../../src/config/load.ts";
import { defaultConfig } from "../../src/config/index.ts";
import { secretFileFindings } from "../../src/config/secret-perms.ts";
import { exposureInfo, exposureWarnings } from "../../src/daemon/exposure.ts";
import { cleanup, tempDir } from "../helpers/herd.ts";
import { peer } from "../helpers/peers.ts";
import { makePki } from "../helpers/pki.ts";

const hasOpenssl = () => peer("openssl", ["openssl", "version"]);
let dir = "";
let pki: ReturnType<typeof makePki>;
const servers: Listening[] = [];

function serve(files: { cert: string; key: string; ca: string }): Listening {
  const app = new Hono().get("/health", (c) => c.json({ status: "ok" }));
  const frontend = { app, refused: () => {} } as unknown as Frontend;
  const l = listen(frontend, "127.0.0.1", 0, 1 << 20, loadListenerTls("frontend.tls", files));
  servers.push(l);
  return l;
}
const pem = (f: string) => readFileSync(f, "utf8");
const get = (url: string, tls?: Record<string, string>) => fetch(`${url}/health`, { signal: AbortSignal.timeout(5000), ...(tls ? { tls } : {}) } as RequestInit);

describe.skipIf(!hasOpenssl())("frontend over TLS", () => {
  beforeAll(() => {
    dir = tempDir("herd-front-tls-");
    pki = makePki(dir, ["front", "client"]);
  });
  afterAll(async () => {
    for (const s of servers) await s.stop(true);
    cleanup(dir);
  });

  test("https with the CA answers; no trust, the wrong CA or plain HTTP on the port are refused", async () => {
    const l = serve({ cert: pki.nodes.front!.cert, key: pki.nodes.front!.key, ca: "" });
    expect(l.url).toStartWith("https://127.0.0.1:");
    const ok = await get(l.url, { ca: pem(pki.ca) });
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual({ status: "ok" });
    await expect(get(l.url)).rejects.toThrow(); // the test CA is not in the system's trust store
    await expect(get(l.url, { ca: pem(pki.untrusted.cert) })).rejects.toThrow();
    // A plain-HTTP client's request is not a TLS ClientHello: the handshake fails, no response.
    await expect(get(l.url.replace("https:", "http:"))).rejects.toThrow();
  });

  test("with frontend.tls.ca a client certificate that CA signed is required", async () => {
    const l = serve({ cert: pki.nodes.front!.cert, key: pki.nodes.front!.key, ca: pki.ca });
    const client = pki.nodes.client!;
    expect((await get(l.url, { ca: pem(pki.ca), cert: pem(client.cert), key: pem(client.key) })).status).toBe(200);
    await expect(get(l.url, { ca: pem(pki.ca) })).rejects.toThrow(); // no certificate
    await expect(get(l.url, { ca: pem(pki.ca), cert: pem(pki.untrusted.cert), key: pem(pki.untrusted.key) })).rejects.toThrow();
  });

  test("the certificate's notAfter is read without openssl; a bad file names its key", () => {
    const s = certNotAfterS(pem(pki.nodes.front!.cert));
    expect(s).toBe(Date.parse(new X509Certificate(pem(pki.nodes.front!.cert)).validTo) / 1000);
    // makePki signs for 2 days
    expect(s * 1000 - Date.parse(new X509Certificate(pem(pki.nodes.front!.cert)).validFrom)).toBe(2 * 86_400_000);
    expect(() => loadListenerTls("frontend.tls", { cert: join(dir, "nope.pem"), key: pki.nodes.front!.key, ca: "" })).toThrow(/^frontend\.tls\.cert .*nope\.pem/);
    writeFileSync(join(dir, "notcert.pem"), "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n");
    expect(() => loadListenerTls("frontend.tls", { cert: join(dir, "notcert.pem"), key: pki.nodes.front!.key, ca: "" })).toThrow(TlsFileError);
  });

  test("a key readable by everyone is a warning naming frontend.tls.key", () => {
    const c = defaultConfig({ hostname: "n1", dataDir: join(dir, "data") });
    c.frontend.tls = { cert: pki.nodes.front!.cert, key: pki.nodes.front!.key, ca: "" };
    chmodSync(pki.nodes.front!.key, 0o600);
    expect(secretFileFindings(c, null)).toEqual([]);
    chmodSync(pki.nodes.front!.key, 0o644);
    expect(secretFileFindings(c, null, () => 7)).toEqual([expect.objectContaining({ path: "frontend.tls.key", line: 7, severity: "warning", message: expect.stringContaining("lets every user on the host read it") })]);
  });
});

describe("frontend.tls config", () => {
  const errors = (yaml: string) => parseConfigText(yaml).findings.filter((f) => f.severity === "error").map((f) => [f.path, f.line, f.message]);

  test("cert without key, a CA without a certificate, and a multi-host peer API on the TLS port are findings with path and line", () => {
    expect(errors("frontend:\n  tls: { cert: /c.pem }\n")).toEqual([["frontend.tls.key", 2, "set both frontend.tls.cert and frontend.tls.key, or neither"]]);
    expect(errors("frontend:\n  tls:\n    ca: /ca.pem\n")).toEqual([["frontend.tls.ca", 3, "frontend.tls.ca (client certificates) needs frontend.tls.cert and key"]]);
    expect(errors("frontend:\n  tls: { cert: /c.pem, key: /k.pem }\ncluster: { discovery: peers, peers: { seeds: ['10.0.0.1:8000'] } }\n")).toEqual([
      ["frontend.tls", 2, expect.stringContaining("other nodes call it as plain HTTP: set cluster.listen")],
    ]);
    expect(errors("frontend:\n  tls: { cert: /c.pem, key: /k.pem, ca: /ca.pem }\n")).toEqual([]);
  });

  test("exposure: bearer keys in clear on a non-loopback plain listener are a warning; TLS is an info line", () => {
    const c = defaultConfig({ hostname: "n1", dataDir: "/tmp/herd-tls-x" });
    c.frontend.listen = "0.0.0.0:8443";
    c.frontend.metrics = "loopback";
    expect(exposureWarnings(c, [])).toEqual([expect.stringContaining("frontend.api_keys is empty")]); // no keys to leak
    c.frontend.api_keys = ["k"];
    expect(exposureWarnings(c, [])).toEqual([expect.stringContaining("as plain HTTP: bearer keys, prompts and completions cross the network in clear; set frontend.tls")]);
    c.frontend.tls = { cert: "/c.pem", key: "/k.pem", ca: "/ca.pem" };
    expect(exposureWarnings(c, [])).toEqual([]);
    expect(exposureInfo(c)).toContain("frontend on 0.0.0.0:8443: TLS (frontend.tls), client certificates signed by frontend.tls.ca required");
    c.frontend.listen = "127.0.0.1:8443";
    c.frontend.tls = { cert: "", key: "", ca: "" };
    expect(exposureWarnings(c, [])).toEqual([]); // loopback: a local proxy terminates TLS
  });
});
