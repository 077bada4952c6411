// Issue 10 item 6: /metrics on a non-loopback listener follows frontend.metrics (open | token |
// loopback) and start-up says which; refused admin calls are logged at most once per interval
// (injected clock), with the count of the ones not logged.
import { describe, expect, test } from "bun:test";
import { defaultConfig } from "../../src/config/load.ts";
import { exposureInfo, exposureWarnings } from "../../src/daemon/exposure.ts";
import { KeySet } from "../../src/http/auth.ts";
import { metricsDenied } from "../../src/http/metrics-access.ts";
import { REFUSED_LOG_EVERY_MS, adminRoutes } from "../../src/admin/routes.ts";
import { memoryLogger } from "../helpers/log.ts";
import { startHerd, trackForCleanup } from "../frontend/harness.ts";

const track = trackForCleanup();
const REMOTE = "203.0.113.9";
const TOKEN = "adm-metrics-token-5521";

describe("metricsDenied", () => {
  const keys = new KeySet([TOKEN]);
  test.each([
    ["open", REMOTE, undefined, null],
    ["loopback", "127.0.0.1", undefined, null],
    ["loopback", "::ffff:127.0.0.1", undefined, null],
    ["loopback", REMOTE, `Bearer ${TOKEN}`, 403],
    ["loopback", null, undefined, 403],
    ["token", REMOTE, `Bearer ${TOKEN}`, null],
    ["token", REMOTE, "Bearer nope", 401],
    ["token", REMOTE, undefined, 401],
    ["token", "::1", undefined, null],
  ] as const)("%s from %s (%s) → %s", (mode, ip, auth, status) => {
    expect(metricsDenied(mode, ip, auth, keys)?.status ?? null).toBe(status);
  });
});

test("start-up names the /metrics mode on a non-loopback listener, nothing on loopback", () => {
  const c = defaultConfig({ hostname: "n1", dataDir: "/tmp/herd-mx" });
  expect([...exposureWarnings(c, []), ...exposureInfo(c)]).toEqual([]);
  c.frontend.listen = "0.0.0.0:8000";
  c.frontend.api_keys = ["k"];
  expect(exposureWarnings(c, [])).toEqual([expect.stringContaining("keys, prompts and completions cross the network in clear"), expect.stringContaining("/metrics on 0.0.0.0:8000 is open to anyone")]);
  c.frontend.tls = { cert: "/c.pem", key: "/k.pem", ca: "" }; // the rest is about /metrics alone
  expect(exposureWarnings(c, [])).toEqual([expect.stringContaining("/metrics on 0.0.0.0:8000 is open to anyone")]);
  c.frontend.metrics = "loopback";
  expect(exposureWarnings(c, [])).toEqual([]);
  expect(exposureInfo(c)).toEqual([expect.stringContaining("served to loopback clients only (frontend.metrics: loopback)"), "frontend on 0.0.0.0:8000: TLS (frontend.tls)"]);
  c.frontend.metrics = "token";
  expect(exposureWarnings(c, [])).toEqual([expect.stringContaining("frontend.admin_token is empty")]);
  c.frontend.admin_token = TOKEN;
  expect(exposureInfo(c)).toEqual([expect.stringContaining("admin-token holders and loopback clients"), "frontend on 0.0.0.0:8000: TLS (frontend.tls)"]);
});

test("the /metrics route follows frontend.metrics for a remote client", async () => {
  const h = track(await startHerd({ workers: [], frontend: { metrics: "token", admin_token: TOKEN } }));
  const get = (auth?: string) => h.frontend.app.fetch(new Request("http://h/metrics", { headers: auth ? { authorization: auth } : {} }), { ip: REMOTE });
  const refused = await get();
  expect(refused.status).toBe(401);
  expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("invalid_admin_token");
  const ok = await get(`Bearer ${TOKEN}`);
  expect(ok.status).toBe(200);
  expect(await ok.text()).toContain("herd_");
  // The real listener: a loopback client is always served.
  expect((await fetch(`${h.url}/metrics`)).status).toBe(200);
  h.config.frontend.metrics = "loopback";
  expect((await get(`Bearer ${TOKEN}`)).status).toBe(403);
});

test("refused admin calls: one warn line per interval with the suppressed count", async () => {
  const h = track(await startHerd({ workers: [] }));
  let nowMs = 0;
  const log = memoryLogger();
  const app = adminRoutes({
    config: h.config,
    registry: h.registry,
    router: h.router,
    backend: undefined,
    log,
    clock: { now: () => nowMs, setTimer: () => ({ cancel() {} }), sleep: async () => {} },
  });
  const call = () => app.fetch(new Request("http://h/cluster"), { ip: REMOTE });
  for (let i = 0; i < 50; i++) expect((await call()).status).toBe(403);
  nowMs += REFUSED_LOG_EVERY_MS;
  expect((await call()).status).toBe(403);
  const warns = log.lines.filter((l) => l.includes("admin request refused") && /\bWARN\b|warn/i.test(l.split("admin request refused")[0]!));
  expect(warns).toHaveLength(2);
  expect(warns[0]).toContain("suppressed=0");
  expect(warns[1]).toContain("suppressed=49");
  expect(warns[1]).toContain(REMOTE);
});
