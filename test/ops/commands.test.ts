// Day-2 commands against a running `herd run` (two sim engines): status (table and --json), drain
// of a worker with a stream in flight (the stream finishes, new requests avoid the worker), undrain
// --node, logs -n; unreachable herd is exit 1 with a clear message; usage errors exit 2; --config
// finds the listener; --token / HERD_ADMIN_TOKEN reach the server as a bearer.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { cleanup, herdCli, simConfigYaml, startHerd, tempDir, type HerdProc } from "./helpers.ts";

let dir = "";
let herd: HerdProc;
const MODEL = "ops-sim";

beforeAll(async () => {
  dir = tempDir("herd-ops-");
  herd = await startHerd(
    dir,
    simConfigYaml({ dir, node: "ops", model: MODEL, count: 2, simArgs: ["--time-scale", "4", "--output-len", "0"], extra: "router: { policy: round-robin }\n" }),
  );
  await until2Ready();
}, 40_000);

afterAll(async () => {
  await herd?.stop();
  if (dir) cleanup(dir);
});

async function until2Ready(): Promise<void> {
  for (let i = 0; i < 400; i++) {
    const r = await herdCli(["status", "--json", "--url", herd.url]);
    if (r.code === 0 && (JSON.parse(r.out).workers as { state: string }[]).every((w) => w.state === "ready")) return;
    await Bun.sleep(50);
  }
  throw new Error("workers never ready");
}

function chat(maxTokens: number, stream: boolean): Promise<Response> {
  return fetch(`${herd.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hello there" }], max_tokens: maxTokens, ignore_eos: true, stream }),
  });
}

describe("herd status", () => {
  test("the cluster line, then a table of the workers: id, state, role, model, load, restarts, pid, KV events", async () => {
    const r = await herdCli(["status", "--url", herd.url]);
    expect(r.code).toBe(0);
    const lines = r.out.trim().split("\n");
    expect(lines[0]).toMatch(/^node ops {2}policy round-robin {2}workers 2\/2 ready {2}in-flight \d+/);
    // One node: its default file cluster, which it leads (issue 12: status shows leader and term).
    expect(lines[1]).toMatch(/^cluster file {2}leader ops {2}term \d+ {2}nodes 1$/);
    expect(lines[2]).toMatch(/^WORKER\s+STATE\s+ROLE\s+MODEL\s+IN-FLIGHT\s+RUNNING\s+WAITING\s+KV\s+RESTARTS\s+PID\s+KV EVENTS$/);
    for (const id of ["ops/sim-0", "ops/sim-1"]) {
      const row = lines.find((l) => l.startsWith(id + " "));
      expect(row).toMatch(new RegExp(`^${id}\\s+ready\\s+aggregated\\s+${MODEL}\\s+\\d+\\s+\\S+\\s+\\S+\\s+\\S+\\s+0\\s+\\d+\\s+(connected|disconnected)`));
    }
  });

  test("--json is the admin API's view; --config finds the listener from frontend.listen", async () => {
    const port = new URL(herd.url).port;
    const cfg = join(dir, "client.yaml");
    writeFileSync(cfg, `frontend: { listen: "0.0.0.0:${port}" }\n`); // a wildcard listen is dialled on loopback
    // A private default data dir: no other herd's runtime file on this host can answer instead.
    const r = await herdCli(["status", "--json", "--config", cfg], { XDG_DATA_HOME: join(dir, "xdg") });
    expect(r.code).toBe(0);
    const view = JSON.parse(r.out);
    expect(view.node).toBe("ops");
    expect(view.workers.map((w: { id: string }) => w.id).sort()).toEqual(["ops/sim-0", "ops/sim-1"]);
    for (const w of view.workers) {
      expect(w.pid).toBeGreaterThan(1);
      // The contract's load keys (the registry may add bookkeeping such as in_flight_at_scrape after a scrape).
      expect(Object.keys(w.load)).toEqual(expect.arrayContaining(["in_flight", "kv_usage", "running", "scraped_at_ms", "waiting"]));
      expect(w.kv_events.topic).toBe(`kv@${w.id}@${MODEL}`);
    }
  });

  test("herd not running: exit 1 and a message that says so; a bad --config names the problem", async () => {
    const r = await herdCli(["status", "--url", "http://127.0.0.1:9"]);
    expect(r.code).toBe(1);
    expect(r.out).toBe("");
    expect(r.err).toContain("herd status: herd is not reachable at http://127.0.0.1:9 (from --url): connection refused. Is herd running?");
    const bad = join(dir, "bad.yaml");
    writeFileSync(bad, "frontend: { listen: 12 }\n");
    const b = await herdCli(["status", "--config", bad]);
    expect(b.code).toBe(1);
    expect(b.err).toContain(`cannot read frontend.listen from ${bad}`);
  });
});

describe("drain and undrain", () => {
  test("a drained worker finishes its open stream and gets no new requests; undrain --node restores it", async () => {
    const res = await chat(1000, true); // ~2 s at time-scale 4: open across the drain
    expect(res.status).toBe(200);
    const victim = res.headers.get("x-herd-worker")!;
    expect(victim).toMatch(/^ops\/sim-[01]$/);
    const body = res.text(); // read the whole stream while the drain happens
    const d = await herdCli(["drain", victim, "--url", herd.url]);
    expect(d.code).toBe(0);
    expect(d.out.trim()).toBe(`${victim}: drained (state draining)`);
    // The stream is still open on the drained worker (so the test shows it finishing, not a finished one).
    const during = (await (await fetch(`${herd.url}/admin/cluster`)).json()) as { workers: { id: string; state: string; load: { in_flight: number } }[] };
    expect(during.workers.find((w) => w.id === victim)).toMatchObject({ state: "draining", load: { in_flight: 1 } });
    const text = await body;
    expect(text).toContain("data: [DONE]");
    expect(text).not.toContain('"error"');
    expect((text.match(/"delta":\{"content"/g) ?? []).length).toBe(1000);

    const seen = new Set<string>();
    for (let i = 0; i < 6; i++) {
      const r = await chat(2, false);
      expect(r.status).toBe(200);
      seen.add(r.headers.get("x-herd-worker")!);
      await r.text();
    }
    expect(seen.has(victim)).toBe(false);
    const st = JSON.parse((await herdCli(["status", "--json", "--url", herd.url])).out);
    expect(st.workers.find((w: { id: string }) => w.id === victim).state).toBe("draining");

    const u = await herdCli(["undrain", "--node", "--url", herd.url]);
    expect(u.code).toBe(0);
    expect(u.out.trim().split("\n").sort()).toEqual(["ops/sim-0: undrained (state ready)", "ops/sim-1: undrained (state ready)"]);
    const back = new Set<string>();
    for (let i = 0; i < 4; i++) {
      const r = await chat(2, false);
      back.add(r.headers.get("x-herd-worker")!);
      await r.text();
    }
    expect(back.has(victim)).toBe(true);
  }, 30_000);

  test("drain --node drains every worker; unknown worker is exit 1; usage errors exit 2", async () => {
    const d = await herdCli(["drain", "--node", "--url", herd.url]);
    expect(d.code).toBe(0);
    expect(d.out).toContain("ops/sim-0: drained");
    expect(d.out).toContain("ops/sim-1: drained");
    const r = await chat(2, false);
    expect(r.status).toBe(503); // nothing left in rotation
    expect((await herdCli(["undrain", "--node", "--url", herd.url])).code).toBe(0);

    const unknown = await herdCli(["drain", "ops/nope-9", "--url", herd.url]);
    expect(unknown.code).toBe(1);
    expect(unknown.err).toContain("answered 404: unknown worker ops/nope-9 (worker_not_found)");
    const both = await herdCli(["drain", "ops/sim-0", "--node", "--url", herd.url]);
    expect(both.code).toBe(2);
    expect(both.err).toContain("name one WORKER or pass --node");
    const none = await herdCli(["undrain", "--url", herd.url]);
    expect(none.code).toBe(2);
    const flag = await herdCli(["status", "--bogus"]);
    expect(flag.code).toBe(2);
    expect(flag.err).toContain("unknown flag --bogus");
  }, 20_000);
});

describe("herd logs", () => {
  test("-n N prints the last N lines of the engine's captured output", async () => {
    const all = await herdCli(["logs", "ops/sim-1", "--url", herd.url]);
    expect(all.code).toBe(0);
    expect(all.out).toContain("Application startup complete.");
    const lines = all.out.trimEnd().split("\n");
    const two = await herdCli(["logs", "ops/sim-1", "-n", "2", "--url", herd.url]);
    expect(two.code).toBe(0);
    expect(two.out.trimEnd().split("\n")).toEqual(lines.slice(-2));
    expect((await herdCli(["logs", "ops/sim-1", "-n", "0", "--url", herd.url])).code).toBe(2);
    const missing = await herdCli(["logs", "ops/none", "--url", herd.url]);
    expect(missing.code).toBe(1);
    expect(missing.err).toContain("unknown worker ops/none");
  }, 20_000);
});

describe("admin token", () => {
  test("--token and HERD_ADMIN_TOKEN are sent as a bearer; a refusal explains how to authenticate", async () => {
    const seen: (string | null)[] = [];
    const fake = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      fetch(req) {
        seen.push(req.headers.get("authorization"));
        return Response.json({ error: { message: "admin API: missing or invalid admin token", type: "authentication_error", code: "invalid_admin_token" } }, { status: 401 });
      },
    });
    try {
      const url = `http://127.0.0.1:${fake.port}`;
      const a = await herdCli(["status", "--url", url, "--token", "t-flag"]);
      const b = await herdCli(["status", "--url", url], { HERD_ADMIN_TOKEN: "t-env" });
      const c = await herdCli(["status", "--url", url], { HERD_ADMIN_TOKEN: "" });
      expect(seen).toEqual(["Bearer t-flag", "Bearer t-env", null]);
      for (const r of [a, b, c]) {
        expect(r.code).toBe(1);
        expect(r.err).toContain("answered 401: admin API: missing or invalid admin token (invalid_admin_token)");
      }
      expect(c.err).toContain("pass --token or set HERD_ADMIN_TOKEN");
    } finally {
      void fake.stop(true);
    }
  }, 20_000);
});
