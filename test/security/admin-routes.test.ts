// Safe by default (issue 6, docs/references.md#reliability-R15; docs/references.md#reliability-2 mitigations 2-4): every /admin route of a running
// daemon, enumerated from the hono route table (so a route added later is covered without editing
// this test), refuses an unauthenticated call from a non-loopback address — 403 when no admin token
// is configured, 401 without or with a wrong bearer (the API key is not an admin token) — and a
// loopback call with a foreign Host (DNS rebinding). And no response of any route, authorized or
// not, carries a configured secret (API key, admin token, an engine env value).
import { afterAll, beforeAll, expect, test } from "bun:test";
import { join } from "node:path";
import { defaultConfig } from "../../src/config/load.ts";
import type { Config } from "../../src/config/types.ts";
import { memoryLogger } from "../helpers/log.ts";
import { startDaemon, type Daemon } from "../../src/daemon/daemon.ts";
import { cleanup, portBase, tempDir } from "../ops/helpers.ts";

const API_KEY = "sk-route-table-api-key-7731";
const ADMIN_TOKEN = "adm-route-table-token-4412";
const ENGINE_SECRET = "hf-engine-env-secret-9083";
const SECRETS = [API_KEY, ADMIN_TOKEN, ENGINE_SECRET];
const REMOTE = "203.0.113.7";
const MODEL = "sec-sim";

const dir = tempDir("herd-sec-");
let daemon: Daemon;
let config: Config;
let worker = "";

beforeAll(async () => {
  config = defaultConfig({ hostname: "sec", dataDir: join(dir, "data") });
  config.frontend.listen = "127.0.0.1:0";
  config.frontend.api_keys = [API_KEY];
  config.frontend.admin_token = ADMIN_TOKEN;
  config.models = [{ name: MODEL, path: MODEL, tokenizer: "", block_size: 16, max_model_len: 0, prefix_caching_hash_algo: "", aliases: [], lora_adapters: [] }];
  config.engines = [{ ...config.engines[0]!, model: MODEL, count: 1, args: ["--time-scale", "50", "--output-len", "4"], env: { HF_TOKEN: ENGINE_SECRET } }];
  config.supervisor.port_range_start = portBase();
  config.supervisor.health_interval_ms = 100;
  daemon = await startDaemon(config, { configPath: null, logger: memoryLogger() });
  await Promise.race([daemon.firstReady, Bun.sleep(20_000).then(() => Promise.reject(new Error("no worker became ready")))]);
  worker = daemon.registry.list()[0]!.id;
}, 30_000);

afterAll(async () => {
  await daemon?.shutdown(true);
  cleanup(dir);
});

interface Call {
  method: string;
  path: string;
  body?: string;
}

/** Every concrete call the route table describes: params filled with a real worker id. */
function routeCalls(prefix: string): Call[] {
  const seen = new Set<string>();
  const calls: Call[] = [];
  for (const r of daemon.frontend.app.routes) {
    if (!r.path.startsWith(prefix) || r.path.endsWith("*")) continue; // middleware entries
    const method = r.method === "ALL" ? "GET" : r.method;
    const path = r.path.replace(/:(\w+)(\{[^}]*\})?/g, (_m, name: string) => (name === "id" ? worker : "x"));
    const key = `${method} ${path}`;
    if (seen.has(key)) continue;
    seen.add(key);
    const body = method === "POST" ? JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hello" }], max_tokens: 2 }) : undefined;
    calls.push({ method, path, ...(body ? { body } : {}) });
  }
  return calls;
}

async function call(c: Call, ip: string, headers: Record<string, string> = {}): Promise<{ status: number; text: string; headers: string }> {
  const init: RequestInit = { method: c.method, headers: { host: "herd.example:8000", "content-type": "application/json", ...headers } };
  if (c.body) init.body = c.body;
  const res = await daemon.frontend.app.fetch(new Request(`http://herd.example:8000${c.path}`, init), { ip });
  return { status: res.status, text: await res.text(), headers: JSON.stringify([...res.headers]) };
}

function noSecret(where: string, r: { text: string; headers: string }): void {
  for (const s of SECRETS) {
    if (r.text.includes(s) || r.headers.includes(s)) throw new Error(`${where}: response carries a configured secret`);
  }
}

test("the route table has the admin routes this test is about", () => {
  const keys = routeCalls("/admin").map((c) => `${c.method} ${c.path.replace(worker, ":id")}`);
  for (const k of ["GET /admin/cluster", "POST /admin/route/explain", "GET /admin/workers/:id/logs", "POST /admin/workers/:id/drain", "POST /admin/workers/:id/undrain"])
    expect(keys).toContain(k);
});

test("every /admin route refuses unauthenticated non-loopback calls and rebinding Hosts; the admin token opens each", async () => {
  const calls = routeCalls("/admin");
  for (const c of calls) {
    const where = `${c.method} ${c.path}`;
    const attempts: Record<string, string>[] = [{}, { authorization: "Bearer wrong-token" }, { authorization: `Bearer ${API_KEY}` }, { authorization: ADMIN_TOKEN }];
    for (const headers of attempts) {
      const r = await call(c, REMOTE, headers);
      expect({ where, status: r.status }).toEqual({ where, status: 401 });
      expect(JSON.parse(r.text).error.code).toBe("invalid_admin_token");
      noSecret(where, r);
    }
    // A loopback peer whose Host is not loopback is a browser being rebinded: refused.
    const rebind = await call(c, "127.0.0.1", { host: "evil.example" });
    expect({ where, status: rebind.status }).toEqual({ where, status: 403 });
    // The right token from afar passes the gate (so the refusals above are the gate, not a 404).
    const ok = await call(c, REMOTE, { authorization: `Bearer ${ADMIN_TOKEN}` });
    expect({ where, denied: ok.status === 401 || ok.status === 403 || ok.status === 404 }).toEqual({ where, denied: false });
    noSecret(where, ok);
  }
  // Undo the drain the enumeration did, for the next test.
  await call({ method: "POST", path: `/admin/workers/${worker}/undrain` }, "127.0.0.1", { host: "127.0.0.1" });
}, 30_000);

test("with no admin token configured (reloaded live), remote admin calls are refused outright", async () => {
  const without = { ...config, frontend: { ...config.frontend, admin_token: "" } };
  daemon.frontend.applyConfig(without);
  try {
    for (const c of routeCalls("/admin")) {
      const attempts: Record<string, string>[] = [{}, { authorization: `Bearer ${ADMIN_TOKEN}` }];
      for (const headers of attempts) {
        const r = await call(c, REMOTE, headers);
        expect({ where: `${c.method} ${c.path}`, status: r.status }).toEqual({ where: `${c.method} ${c.path}`, status: 403 });
        expect(JSON.parse(r.text).error.code).toBe("admin_loopback_only");
      }
    }
  } finally {
    daemon.frontend.applyConfig(config);
  }
});

test("no route of the daemon returns a configured secret, whoever asks", async () => {
  const calls = routeCalls("/");
  expect(calls.length).toBeGreaterThanOrEqual(10);
  const callers: [string, Record<string, string>][] = [
    ["127.0.0.1", { host: "127.0.0.1:8000" }],
    ["127.0.0.1", { host: "127.0.0.1:8000", authorization: `Bearer ${API_KEY}` }],
    [REMOTE, {}],
    [REMOTE, { authorization: `Bearer ${ADMIN_TOKEN}` }],
    [REMOTE, { authorization: `Bearer ${API_KEY}` }],
  ];
  let statuses = 0;
  for (const c of calls) {
    for (const [ip, headers] of callers) {
      const r = await call(c, ip, headers);
      noSecret(`${c.method} ${c.path} from ${ip}`, r);
      if (r.status === 200) statuses++;
    }
  }
  expect(statuses).toBeGreaterThan(calls.length); // the calls did reach real handlers
  // The engine's captured output, as `herd logs` shows it, has no secret either.
  const logs = await call({ method: "GET", path: `/admin/workers/${worker}/logs?lines=10000` }, "127.0.0.1", { host: "127.0.0.1" });
  expect(logs.status).toBe(200);
  noSecret("engine logs", logs);
}, 30_000);
