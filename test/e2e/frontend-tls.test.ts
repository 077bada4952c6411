// `herd run` with frontend.tls (issue 22): the official openai client streams a chat completion over
// https (trusting the test CA), plain HTTP on the same port gets no answer, a client that does not
// trust the certificate is refused, and /metrics carries the certificate's expiry for the alert of
// config/observability/prometheus-rules.yml (herd_tls_cert_expiry_timestamp_seconds, issue 23).
// Certificates are made in the test with openssl (test/helpers/pki.ts).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { X509Certificate } from "node:crypto";
import OpenAI from "openai";
import { cleanup, portBase, startHerd, tempDir, type HerdProc } from "../helpers/herd.ts";
import { peer } from "../helpers/peers.ts";
import { makePki } from "../helpers/pki.ts";

let dir = "";
let herd: HerdProc | null = null;
let ca = "";
let certPem = "";

describe.skipIf(!peer("openssl", ["openssl", "version"]))("herd run with frontend.tls", () => {
  beforeAll(async () => {
    dir = tempDir("herd-e2e-front-tls-");
    mkdirSync(join(dir, "pki"));
    const pki = makePki(join(dir, "pki"), ["front"]);
    ca = readFileSync(pki.ca, "utf8");
    certPem = readFileSync(pki.nodes.front!.cert, "utf8");
    herd = await startHerd(
      dir,
      `node: { data_dir: ${JSON.stringify(join(dir, "data"))} }
frontend: { api_keys: [e2e-key], tls: { cert: ${pki.nodes.front!.cert}, key: ${pki.nodes.front!.key} } }
supervisor: { port_range_start: ${portBase()} }
models: [{ name: tls-sim }]
engines: [{ kind: sim, model: tls-sim, count: 1, args: ["--time-scale", "20"] }]
`,
      { readyTimeoutMs: 40_000 },
    );
  }, 60_000);
  afterAll(async () => {
    await herd?.stop();
    cleanup(dir);
  });

  test("the openai client streams a chat completion over https", async () => {
    expect(herd!.url).toStartWith("https://127.0.0.1:");
    const client = new OpenAI({
      baseURL: `${herd!.url}/v1`,
      apiKey: "e2e-key",
      maxRetries: 0,
      fetch: ((url: string, init?: RequestInit) => fetch(url, { ...init, tls: { ca } } as RequestInit)) as unknown as typeof fetch,
    });
    const stream = await client.chat.completions.create({ model: "tls-sim", stream: true, max_tokens: 8, messages: [{ role: "user", content: "hello over TLS" }] });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? "";
    expect(text.length).toBeGreaterThan(0);
  });

  test("plain HTTP on the TLS port and a client without the CA get no answer", async () => {
    const plainUrl = herd!.url.replace("https:", "http:");
    await expect(fetch(`${plainUrl}/health`, { signal: AbortSignal.timeout(5000) })).rejects.toThrow();
    await expect(fetch(`${herd!.url}/health`, { signal: AbortSignal.timeout(5000) })).rejects.toThrow();
    expect((await fetch(`${herd!.url}/health`, { tls: { ca } } as RequestInit)).status).toBe(200);
  });

  test("/metrics carries the frontend certificate's notAfter", async () => {
    const text = await (await fetch(`${herd!.url}/metrics`, { tls: { ca } } as RequestInit)).text();
    const m = /^herd_tls_cert_expiry_timestamp_seconds\{listener="frontend"\} (\S+)$/m.exec(text);
    expect(m).not.toBeNull();
    expect(Number(m![1])).toBe(Date.parse(new X509Certificate(certPem).validTo) / 1000);
    expect(text).not.toContain('listener="peer"'); // no cluster.tls
  });
});
