// `herd top`: the frame from two readings (rates as counter deltas, percentiles from histogram
// bucket deltas), cut to the terminal; `--once` against a running herd; and the live view in a
// real terminal under tmux (skipped without tmux): it draws the workers, shows the request rate of
// traffic sent meanwhile, redraws, and `q` quits with exit 0 and the screen restored.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { spawnSync } from "node:child_process";
import { peer } from "../helpers/peers.ts";
import { quantileBetween, readMetrics, renderTop } from "../../src/ops/top.ts";
import type { ClusterView } from "../../src/ops/client.ts";
import { BUN, ROOT, cleanup, herdCli, simConfigYaml, startHerd, tempDir, type HerdProc } from "./helpers.ts";

const metrics = (reqs: number, errs: number, ttft: [number, number, number]) => `# TYPE herd_requests_total counter
herd_requests_total{model="m",worker="n/sim-0",status="200"} ${reqs}
herd_requests_total{model="m",worker="n/sim-0",status="502"} ${errs}
herd_requests_total{model="m",worker="",status="429"} 1
herd_rejected_requests_total{reason="overloaded"} 1
herd_time_to_first_token_seconds_bucket{model="m",le="0.1"} ${ttft[0]}
herd_time_to_first_token_seconds_bucket{model="m",le="0.5"} ${ttft[1]}
herd_time_to_first_token_seconds_bucket{model="m",le="+Inf"} ${ttft[2]}
`;
const view: ClusterView = {
  node: "n",
  policy: "kv",
  in_flight: 2,
  leader: "n",
  term: 3,
  workers: [
    { id: "n/sim-0", node: "n", model: "m", role: "aggregated", kind: "sim", url: "", state: "ready", load: { in_flight: 2, running: 1, waiting: 0, kv_usage: 0.25, scraped_at_ms: 0 }, restarts: 1, pid: 7, kv_events: null },
    { id: "n/sim-1", node: "n", model: "m", role: "aggregated", kind: "sim", url: "", state: "draining", load: { in_flight: 0, running: null, waiting: null, kv_usage: null, scraped_at_ms: null }, restarts: 0, pid: 8, kv_events: null },
  ],
};

describe("herd top frame", () => {
  test("rates are deltas over the time between readings; a worker without traffic shows 0", () => {
    const prev = readMetrics(metrics(10, 1, [0, 0, 0]), 0);
    const cur = readMetrics(metrics(30, 3, [10, 18, 20]), 2000);
    const lines = renderTop({ view, cur, prev, intervalMs: 2000, clock: "12:00:00", columns: 200, rows: 50 });
    const text = lines.join("\n");
    expect(lines[0]).toContain("node n");
    expect(lines[0]).toContain("workers 1/2 ready");
    expect(lines[0]).toContain("leader n term 3");
    expect(lines[1]).toContain("requests 11.0/s"); // (33 - 11) / 2 s, the refused 429 counted once each time
    expect(lines[1]).toContain("5xx 1.0/s");
    const row0 = lines.find((l) => l.startsWith("n/sim-0"))!.split(/\s+/);
    expect(row0).toEqual(["n/sim-0", "n", "ready", "aggregated", "m", "2", "1", "0", "25%", "11.0", "1.0", "1"]);
    expect(lines.find((l) => l.startsWith("n/sim-1"))).toContain("0.0");
    // 20 TTFTs in the interval: 10 under 100 ms, 8 in (100, 500] ms, 2 above: p50 at the first bucket's top, p95 past the last bound.
    const model = lines.find((l) => l.startsWith("m "))!;
    expect(model).toContain("100 ms");
    expect(model).toContain("500 ms");
    expect(text).toContain("q quit");
  });

  test("first frame: rates 0 and 'measuring'; a narrow, short terminal cuts lines and lists fewer workers", () => {
    const cur = readMetrics(metrics(1, 0, [1, 1, 1]), 0);
    const lines = renderTop({ view, cur, prev: null, intervalMs: 1000, clock: "12:00:00", columns: 40, rows: 9 });
    expect(lines.length).toBeLessThanOrEqual(9);
    for (const l of lines) expect(l.length).toBeLessThanOrEqual(40);
    expect(lines[1]).toContain("requests 0.0/s");
  });

  test("quantiles interpolate within a bucket; no observations is null", () => {
    const b = (a: number, c: number) => new Map([[1, a], [2, c], [Infinity, c]]);
    expect(quantileBetween(b(0, 0), b(0, 10), 0.5)).toBe(1.5);
    expect(quantileBetween(b(5, 5), b(5, 5), 0.5)).toBeNull();
    expect(quantileBetween(undefined, b(10, 10), 0.5)).toBe(0.5);
  });
});

describe("herd top against a running herd", () => {
  let dir = "";
  let herd: HerdProc;
  beforeAll(async () => {
    dir = tempDir("herd-top-");
    herd = await startHerd(dir, simConfigYaml({ dir, node: "topnode", model: "top-sim", count: 2, simArgs: ["--time-scale", "20"] }));
  }, 40_000);
  afterAll(async () => {
    await herd?.stop();
    if (dir) cleanup(dir);
  });
  const chat = () =>
    fetch(`${herd.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "top-sim", messages: [{ role: "user", content: "hi" }], max_tokens: 2 }) }).then((r) => r.text());

  test("--once prints one frame as text; a bad interval is a usage error (exit 2)", async () => {
    const traffic = (async () => {
      for (let i = 0; i < 20; i++) await chat();
    })();
    const r = await herdCli(["top", "--once", "--interval-ms", "1500", "--url", herd.url]);
    await traffic;
    expect(r.code).toBe(0);
    expect(r.out).toContain("herd top  node topnode");
    expect(r.out).toContain("topnode/sim-0");
    expect(r.out).not.toContain("\x1b[");
    expect(r.out).not.toMatch(/requests 0\.0\/s/);
    expect((await herdCli(["top", "--interval-ms", "5", "--url", herd.url])).code).toBe(2);
  }, 30_000);

  test.skipIf(!peer("tmux", ["tmux", "-V"]))("under tmux: the live view draws workers and rates, redraws, q quits (exit 0, screen restored)", async () => {
    const sock = `herd-top-${process.pid}-${crypto.randomUUID().slice(0, 8)}`;
    const tmux = (...args: string[]) => spawnSync("tmux", ["-L", sock, ...args], { encoding: "utf8" });
    const cmd = `${BUN} ${join(ROOT, "src/cli.ts")} top --interval-ms 300 --url ${herd.url}; echo "TOP-EXIT=$?"; sleep 60`;
    expect(tmux("new-session", "-d", "-s", "top", "-x", "150", "-y", "30", "sh", "-c", cmd).status).toBe(0);
    const pane = () => tmux("capture-pane", "-p", "-t", "top").stdout;
    const until = async (what: string, ok: (p: string) => boolean, ms = 15_000) => {
      const end = performance.now() + ms;
      while (performance.now() < end) {
        if (ok(pane())) return;
        await Bun.sleep(100);
      }
      throw new Error(`tmux pane never showed ${what}:\n${pane()}`);
    };
    try {
      await until("the workers", (p) => p.includes("topnode/sim-0") && p.includes("topnode/sim-1"));
      let sending = true;
      const traffic = (async () => {
        while (sending) await chat();
      })();
      await until("a non-zero request rate", (p) => /requests [1-9][\d.]*\/s/.test(p));
      const t1 = /(\d\d:\d\d:\d\d)/.exec(pane())?.[1];
      await until("a redraw (the clock moves)", (p) => /(\d\d:\d\d:\d\d)/.exec(p)?.[1] !== t1, 5_000);
      sending = false;
      await traffic;
      expect(tmux("send-keys", "-t", "top", "q").status).toBe(0);
      await until("exit 0 after q", (p) => p.includes("TOP-EXIT=0"), 5_000);
      expect(pane()).not.toContain("topnode/sim-0"); // the alternate screen is gone with the frame
    } finally {
      tmux("kill-server");
    }
  }, 60_000);
});
