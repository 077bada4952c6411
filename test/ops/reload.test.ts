// SIGHUP reload: the pure diff (classifyChanges / planReload / mergeLive) and a running herd that
// applies live keys, names restart-required keys without applying them, and keeps its config when
// the new file is invalid.
import { afterAll, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { defaultConfig } from "../../src/config/load.ts";
import type { Config } from "../../src/config/types.ts";
import { LIVE_KEYS, changedPaths, classifyChanges, mergeLive, planReload } from "../../src/daemon/reload.ts";
import { cleanup, herdCli, portBase, simConfigYaml, startHerd, tempDir, type HerdProc } from "./helpers.ts";

const base = (): Config => defaultConfig({ hostname: "n1", dataDir: "/tmp/herd-reload" });
const edit = (f: (c: Config) => void): Config => {
  const c = base();
  f(c);
  return c;
};

describe("classifyChanges", () => {
  test("no change: nothing to apply", () => {
    expect(classifyChanges(base(), base())).toEqual({ live: [], restart: [] });
  });

  test("frontend admission, secrets and timeouts are live", () => {
    const next = edit((c) => {
      c.frontend.api_keys = ["sk-new"];
      c.frontend.admin_token = "adm";
      c.frontend.max_in_flight = 3;
      c.frontend.max_body_bytes = 1000;
      c.frontend.first_token_timeout_ms = 1;
      c.frontend.idle_timeout_ms = 2;
      c.frontend.drain_timeout_ms = 3;
      c.frontend.migration_grace_ms = 7;
      c.frontend.body_timeout_ms = 4;
      c.frontend.max_messages = 5;
      c.frontend.max_prompt_chars = 6;
      c.frontend.max_json_values = 2048;
      c.frontend.max_body_bytes_in_flight = 4096;
      c.frontend.metrics = "loopback";
      c.frontend.queue.worker_slots = 8;
      c.router.policy = "random";
    });
    const ch = classifyChanges(base(), next);
    expect(ch.restart).toEqual([]);
    expect(ch.live.sort()).toEqual([...LIVE_KEYS].sort());
  });

  test("listener, node identity, state dir, engines, models, supervisor need a restart; router is live as a whole", () => {
    const next = edit((c) => {
      c.frontend.listen = "0.0.0.0:9000";
      c.node.name = "other";
      c.node.data_dir = "/var/lib/herd";
      c.router.policy = "session";
      c.router.kv.overlap_credit.cpu = 0.5;
      c.engines[0]!.count = 4;
      c.models[0]!.block_size = 32;
      c.supervisor.max_restarts = 9;
    });
    const ch = classifyChanges(base(), next);
    expect(ch.live).toEqual(["router"]);
    expect(ch.restart.sort()).toEqual(["engines[0].count", "frontend.listen", "models[0].block_size", "node.data_dir", "node.name", "supervisor.max_restarts"].sort());
    const merged = mergeLive(base(), next, ch.live);
    expect(merged.router).toEqual(next.router);
    expect(merged.node.name).toBe(base().node.name);
  });

  test("a list that changes length is named as a whole; mixed changes are split", () => {
    const next = edit((c) => {
      c.engines.push(structuredClone(c.engines[0]!));
      c.frontend.api_keys = ["a", "b"];
    });
    expect(classifyChanges(base(), next)).toEqual({ live: ["frontend.api_keys"], restart: ["engines"] });
    expect(changedPaths({ a: [1, 2] }, { a: [1, 3] })).toEqual(["a"]);
    expect(changedPaths({ a: { b: 1 } }, { a: { b: 1, c: 2 } })).toEqual(["a.c"]);
  });

  test("only key names come out, never values (secrets stay out of logs)", () => {
    const next = edit((c) => {
      c.frontend.api_keys = ["sk-very-secret"];
      c.frontend.admin_token = "adm-very-secret";
      c.engines[0]!.env = { HF_TOKEN: "hf-very-secret" };
    });
    const out = JSON.stringify(classifyChanges(base(), next));
    expect(out).not.toContain("very-secret");
    expect(out).toContain("engines[0].env.HF_TOKEN");
  });
});

describe("mergeLive and planReload", () => {
  test("the merged config takes live keys from the new file and keeps the running values of the rest", () => {
    const running = base();
    const next = edit((c) => {
      c.frontend.api_keys = ["k"];
      c.frontend.listen = "0.0.0.0:1";
      c.node.name = "elsewhere";
    });
    const plan = planReload(running, next, { maxBodyBytesLive: 1 << 30 });
    expect(plan.live).toEqual(["frontend.api_keys"]);
    expect(plan.restart.sort()).toEqual(["frontend.listen", "node.name"]);
    expect(plan.config.frontend.api_keys).toEqual(["k"]);
    expect(plan.config.frontend.listen).toBe(running.frontend.listen);
    expect(plan.config.node.name).toBe(running.node.name);
    // Comparing the next file against the merged config names the pending restart keys again.
    expect(classifyChanges(plan.config, next).restart.sort()).toEqual(["frontend.listen", "node.name"]);
    // The running config object is not modified.
    expect(running.frontend.api_keys).toEqual([]);
    expect(mergeLive(running, next, []).frontend.api_keys).toEqual([]);
  });

  test("max_body_bytes beyond the listener's fixed backstop needs a restart", () => {
    const running = base();
    const small = edit((c) => void (c.frontend.max_body_bytes = 1000));
    const huge = edit((c) => void (c.frontend.max_body_bytes = 1 << 30));
    expect(planReload(running, small, { maxBodyBytesLive: 1 << 21 }).live).toEqual(["frontend.max_body_bytes"]);
    const p = planReload(running, huge, { maxBodyBytesLive: 1 << 21 });
    expect(p.live).toEqual([]);
    expect(p.restart).toEqual(["frontend.max_body_bytes"]);
    expect(p.config.frontend.max_body_bytes).toBe(running.frontend.max_body_bytes);
  });
});

describe("SIGHUP on a running herd", () => {
  let dir = "";
  let herd: HerdProc | null = null;
  afterAll(async () => {
    await herd?.stop();
    if (dir) cleanup(dir);
  });

  test("live keys apply, restart keys are named and kept, an invalid file changes nothing", async () => {
    dir = tempDir("herd-reload-");
    const ports = portBase();
    const yaml = (extra: string, frontend = "") =>
      simConfigYaml({ dir, node: "rl", simArgs: ["--time-scale", "4", "--output-len", "0"], extra, portBase: ports }).replace(
        'frontend: { listen: "127.0.0.1:0" }',
        `frontend: { listen: "127.0.0.1:0"${frontend} }`,
      );
    herd = await startHerd(dir, yaml("router: { policy: round-robin }\n"));
    const h = herd;
    const models = (key?: string) => fetch(`${h.url}/v1/models`, key ? { headers: { authorization: `Bearer ${key}` } } : {});
    expect((await models()).status).toBe(200);

    // api_keys, max_in_flight and the router (live: a new Router is swapped in); the engine count (restart).
    writeFileSync(h.configPath, yaml("router: { policy: random }\n", ", api_keys: [sk-reload-1], max_in_flight: 1").replace("count: 1", "count: 2"));
    let mark = h.log().length;
    h.proc.kill("SIGHUP");
    await h.waitLog(/config reloaded: applied frontend\.api_keys, frontend\.max_in_flight, router\n/, 5_000, mark);
    const warn = (await h.waitLog(/config reload: restart required to apply (.*) \(running with the previous values\)/, 5_000, mark))[1]!;
    expect(warn.split(", ").sort()).toEqual(["engines[0].count"]); // --listen still overrides the file's listen
    expect(h.log().slice(mark)).not.toContain("sk-reload-1");
    expect((await models()).status).toBe(401);
    expect((await models("sk-reload-1")).status).toBe(200);
    const st = JSON.parse((await herdCli(["status", "--json", "--url", h.url])).out);
    expect(st.policy).toBe("random");
    expect(st.workers).toHaveLength(1);

    // max_in_flight 1: with one stream open, the next request is refused with 429.
    const body = (n: number) => JSON.stringify({ model: "rl-sim", prompt: "x", max_tokens: n, ignore_eos: true, stream: true });
    const auth = { "content-type": "application/json", authorization: "Bearer sk-reload-1" };
    const open = await fetch(`${h.url}/v1/completions`, { method: "POST", headers: auth, body: body(400) });
    expect(open.status).toBe(200);
    const second = await fetch(`${h.url}/v1/completions`, { method: "POST", headers: auth, body: body(1) });
    expect(second.status).toBe(429);
    await open.text();

    // A broken file: findings logged, the previous config (with the reloaded key) stays.
    writeFileSync(h.configPath, yaml("router: { policy: nope }\n"));
    mark = h.log().length;
    h.proc.kill("SIGHUP");
    await h.waitLog(/config reload failed: 1 error in .*herd\.yaml; still running the previous config/, 5_000, mark);
    expect(h.log().slice(mark)).toContain("router.policy");
    expect((await models()).status).toBe(401);
    expect((await models("sk-reload-1")).status).toBe(200);

    // Back to the original file: the key requirement goes away again.
    writeFileSync(h.configPath, yaml("router: { policy: round-robin }\n"));
    mark = h.log().length;
    h.proc.kill("SIGHUP");
    await h.waitLog(/config reloaded: applied frontend\.api_keys, frontend\.max_in_flight, router\n/, 5_000, mark);
    expect(JSON.parse((await herdCli(["status", "--json", "--url", h.url])).out).policy).toBe("round-robin");
    expect(h.log().slice(mark)).not.toContain("restart required");
    expect((await models()).status).toBe(200);
    expect(h.proc.exitCode).toBeNull();
  }, 40_000);
});
