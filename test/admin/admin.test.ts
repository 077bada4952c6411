// Admin API: access rules (loopback, token, Host/Origin), /admin/cluster, /admin/route/explain,
// logs and drain through a backend, and no configured secret in any response.
import { describe, expect, test } from "bun:test";
import { MODEL, chatBody, chatCompletion, post, startHerd, startUpstream, trackForCleanup, type Herd } from "../frontend/harness.ts";

const track = trackForCleanup();

const SECRETS = { api_keys: ["sk-api-secret"], admin_token: "adm-secret-token" };

/** Call the app as if from `ip` (the Bun.serve shell normally supplies it). */
function fromIp(h: Herd, ip: string, path: string, init: RequestInit = {}): Promise<Response> {
  return Promise.resolve(h.frontend.app.fetch(new Request(`http://herd.example${path}`, init), { ip }));
}

describe("access", () => {
  test("loopback clients reach /admin without a token", async () => {
    const h = track(await startHerd({ workers: [] }));
    expect((await fetch(`${h.url}/admin/cluster`)).status).toBe(200);
  });

  test("non-loopback: refused without a configured token, 401 without/with a wrong bearer, 200 with it", async () => {
    const open = track(await startHerd({ workers: [] }));
    const r0 = await fromIp(open, "10.0.0.5", "/admin/cluster");
    expect(r0.status).toBe(403);
    expect(((await r0.json()) as any).error.code).toBe("admin_loopback_only");

    const h = track(await startHerd({ workers: [], frontend: SECRETS }));
    expect((await fromIp(h, "10.0.0.5", "/admin/cluster")).status).toBe(401);
    expect((await fromIp(h, "10.0.0.5", "/admin/cluster", { headers: { authorization: "Bearer sk-api-secret" } })).status).toBe(401);
    const ok = await fromIp(h, "10.0.0.5", "/admin/cluster", { headers: { authorization: "Bearer adm-secret-token" } });
    expect(ok.status).toBe(200);
    // Unknown address (no requestIP) is treated as remote: fail closed.
    expect((await Promise.resolve(open.frontend.app.fetch(new Request("http://x/admin/cluster"), { ip: null }))).status).toBe(403);
    // IPv6 and IPv4-mapped loopback count as loopback.
    expect((await fromIp(open, "::1", "/admin/cluster", { headers: { host: "[::1]:8000" } })).status).toBe(200);
    expect((await fromIp(open, "::ffff:127.0.0.1", "/admin/cluster", { headers: { host: "127.0.0.1:8000" } })).status).toBe(200);
  });

  test("loopback with a foreign Host (DNS rebinding) or a foreign Origin (CSRF) is refused", async () => {
    const h = track(await startHerd({ workers: [] }));
    const rebind = await fetch(`${h.url}/admin/cluster`, { headers: { host: "attacker.example" } });
    expect(rebind.status).toBe(403);
    const csrf = await fetch(`${h.url}/admin/route/explain`, { method: "POST", headers: { origin: "https://evil.example" }, body: JSON.stringify(chatBody()) });
    expect(csrf.status).toBe(403);
    const nullOrigin = await fetch(`${h.url}/admin/cluster`, { headers: { origin: "null" } });
    expect(nullOrigin.status).toBe(403);
    const localOrigin = await fetch(`${h.url}/admin/cluster`, { headers: { origin: "http://localhost:3000" } });
    expect(localOrigin.status).toBe(200);
  });
});

describe("endpoints", () => {
  test("/admin/cluster lists workers with the contract's fields and no secrets", async () => {
    const up = track(startUpstream(() => Response.json(chatCompletion("x"))));
    const h = track(await startHerd({ workers: [{ id: "testnode/sim-0", url: up.url }, { id: "testnode/sim-1", url: "http://127.0.0.1:9", state: "starting" }], frontend: SECRETS }));
    const res = await fetch(`${h.url}/admin/cluster`);
    const text = await res.text();
    expect(text).not.toContain("sk-api-secret");
    expect(text).not.toContain("adm-secret-token");
    const j = JSON.parse(text);
    expect(j.node).toBe("testnode");
    expect(j.workers.length).toBe(2);
    const w = j.workers[0];
    for (const k of ["id", "node", "model", "role", "url", "state", "load", "restarts"]) expect(w).toHaveProperty(k);
    expect(w).toMatchObject({ id: "testnode/sim-0", model: MODEL, role: "aggregated", url: up.url, state: "ready" });
    expect(w.load).toMatchObject({ in_flight: 0, running: null });
    expect(j.workers[1].state).toBe("starting");
  });

  test("/admin/route/explain shows candidates and the pick, sends nothing, does not advance routing", async () => {
    const a = track(startUpstream(() => Response.json(chatCompletion("a"))));
    const b = track(startUpstream(() => Response.json(chatCompletion("b"))));
    const h = track(await startHerd({ workers: [{ id: "a", url: a.url }, { id: "b", url: b.url }, { id: "c", url: "http://127.0.0.1:9", state: "failed" }] }));
    const ex1: any = await (await post(`${h.url}/admin/route/explain`, chatBody({ kv_transfer_params: {} }))).json();
    const ex2: any = await (await post(`${h.url}/admin/route/explain`, chatBody())).json();
    expect(ex1.policy).toBe("round-robin");
    expect(ex1.candidates.map((c: any) => c.worker)).toEqual(["a", "b"]);
    expect(ex1.filtered).toEqual([{ worker: "c", node: "testnode", filter: "state" }]);
    expect(ex1.stripped_fields).toEqual(["kv_transfer_params"]);
    expect(ex2.chosen).toBe(ex1.chosen);
    expect(a.received.length + b.received.length).toBe(0);
    // The real request goes where explain said.
    const real = await post(`${h.url}/v1/chat/completions`, chatBody());
    expect(real.headers.get("x-herd-worker")).toBe(ex1.chosen);
    // Completions bodies and errors are explained too.
    const ex3: any = await (await post(`${h.url}/admin/route/explain`, { model: MODEL, prompt: "hi" })).json();
    expect(ex3.candidates.length).toBe(2);
    const missing = await post(`${h.url}/admin/route/explain`, { model: "nope", prompt: "hi" });
    expect(missing.status).toBe(404);
    const bad = await post(`${h.url}/admin/route/explain`, { prompt: "hi" });
    expect(bad.status).toBe(400);
  });

  test("logs and drain/undrain go through the backend; 501 without one", async () => {
    const up = track(startUpstream(() => Response.json(chatCompletion("x"))));
    const bare = track(await startHerd({ workers: [{ id: "n/sim-0", url: up.url }] }));
    expect((await fetch(`${bare.url}/admin/workers/n/sim-0/logs`)).status).toBe(501);

    let h: Herd;
    h = track(
      await startHerd({
        workers: [{ id: "n/sim-0", url: up.url }],
        admin: {
          logs: (id, lines) => (id === "n/sim-0" ? Array.from({ length: Math.min(lines, 3) }, (_, i) => `line ${i}`) : null),
          drain: (id) => h.registry.setState(id, "draining"),
          undrain: (id) => h.registry.setState(id, "ready"),
        },
      }),
    );
    const logs: any = await (await fetch(`${h.url}/admin/workers/n/sim-0/logs?lines=2`)).json();
    expect(logs).toEqual({ worker: "n/sim-0", lines: ["line 0", "line 1"] });
    expect((await fetch(`${h.url}/admin/workers/zzz/logs`)).status).toBe(404);
    const d: any = await (await fetch(`${h.url}/admin/workers/n/sim-0/drain`, { method: "POST" })).json();
    expect(d.state).toBe("draining");
    expect((await post(`${h.url}/v1/chat/completions`, chatBody())).status).toBe(503);
    await fetch(`${h.url}/admin/workers/n/sim-0/undrain`, { method: "POST" });
    expect((await post(`${h.url}/v1/chat/completions`, chatBody())).status).toBe(200);
  });
});
