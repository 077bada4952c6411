// `herd top` under tmux (a real terminal): the frame shows the node, leader, workers and request
// rates from a running `herd run`; a drained worker shows as drained on a later frame; `q` quits
// and the terminal gets its screen back. renderTop itself on a fixed view.
import { describe, expect, test } from "bun:test";
import { renderTop, type TopRecord } from "../../src/ops/top.ts";
import type { ClusterView } from "../../src/ops/client.ts";
import { BUN, ROOT, cleanup, portBase, startHerd, tempDir, waitFor, type HerdProc } from "../helpers/herd.ts";
import { peer } from "../helpers/peers.ts";
import { join } from "node:path";

const hasTmux = () => peer("tmux", ["tmux", "-V"]);

const rec = (over: Partial<TopRecord>): TopRecord => ({
  timestamp: 0, worker: "n/sim-0", outcome: "complete", status: 200, error: null, input_length: 100, cached_tokens: 50, ttft_ms: 20, itl_ms: 5, e2e_ms: 100, ...over,
});

describe("herd top", () => {
  test("one frame: rates over 10 and 60 s, percentiles, per-worker hits and errors, drained state", () => {
    const view: ClusterView = {
      node: "n", policy: "kv", leader: "n", term: 3, in_flight: 1, nodes: [],
      workers: [0, 1].map((i) => ({
        id: `n/sim-${i}`, node: "n", model: "m", role: "aggregated", kind: "sim", url: "", state: i === 1 ? "draining" : "ready",
        load: { in_flight: i, running: 0, waiting: 0, kv_usage: 0.25, scraped_at_ms: 0 }, restarts: i, pid: null, kv_events: null,
      })),
    };
    const now = 100_000;
    const records = [
      ...Array.from({ length: 30 }, (_, i) => rec({ timestamp: now - 55_000 + i * 100, ttft_ms: 10 + i })),
      ...Array.from({ length: 20 }, (_, i) => rec({ timestamp: now - 5_000 + i, worker: "n/sim-1", cached_tokens: 0, ttft_ms: 100 })),
      rec({ timestamp: now - 1000, worker: "n/sim-1", outcome: "upstream_failed", status: 502, error: "reset", cached_tokens: null, ttft_ms: null }),
      rec({ timestamp: now - 70_000 }), // outside the minute
    ];
    const frame = renderTop(view, records, now, new Set(["n/sim-1"]));
    const lines = frame.split("\n");
    expect(lines[0]).toContain("leader n  term 3  policy kv  workers 1/2 ready  in-flight 1");
    expect(lines[1]).toContain("requests 2.1/s (10s)  0.8/s (60s)  5xx 1");
    const row = (id: string) => lines.find((l) => l.startsWith(id))!.split(/\s{2,}/);
    expect(row("n/sim-0")).toEqual(["n/sim-0", "ready", "0", "0/0", "25%", "0.50", "50%", "38ms", "0", "0"]);
    expect(row("n/sim-1")).toEqual(["n/sim-1", "drained", "1", "0/0", "25%", "0.35", "0%", "100ms", "1", "1"]);
  });

  test.skipIf(!hasTmux())("under tmux against herd run: workers and leader, a drain shows, q quits", async () => {
    const dir = tempDir("herd-top-");
    const sock = `herd-top-${process.pid}-${Math.floor(Math.random() * 1e6)}`;
    const tmux = (...args: string[]) => Bun.spawnSync(["tmux", "-L", sock, ...args], { stdout: "pipe", stderr: "pipe" });
    let herd: HerdProc | null = null;
    try {
      herd = await startHerd(dir, `node: { name: top-node, data_dir: ${JSON.stringify(join(dir, "data"))} }
models: [{ name: herd-sim, path: herd-sim }]
engines:
  - { kind: sim, model: herd-sim, count: 2, args: ["--time-scale", "10"] }
supervisor: { port_range_start: ${portBase()} }
`);
      const url = herd.url;
      await waitFor("both engines ready", async () => ((await (await fetch(`${url}/admin/cluster`)).json()) as ClusterView).workers.every((w) => w.state === "ready"), 30_000, herd.log);
      for (let i = 0; i < 8; i++) {
        const r = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "herd-sim", messages: [{ role: "user", content: `hi ${i}` }], max_tokens: 6, stream: true }) });
        await r.text();
      }
      const started = tmux("new-session", "-d", "-s", "top", "-x", "140", "-y", "30", `cd ${ROOT} && ${BUN} src/cli.ts top --url ${url} --interval-ms 300; echo TOP-EXITED $?; sleep 30`);
      expect(started.exitCode, started.stderr.toString()).toBe(0);
      const screen = () => tmux("capture-pane", "-p", "-t", "top").stdout.toString();
      const first = await waitFor("a frame", async () => (screen().includes("herd top") ? screen() : null), 15_000);
      expect(first).toContain("leader top-node");
      expect(first).toContain("top-node/sim-0");
      expect(first).toContain("top-node/sim-1");
      expect(first).toMatch(/requests \d+\.\d\/s \(10s\)/);
      expect((await fetch(`${url}/admin/workers/top-node/sim-1/drain`, { method: "POST" })).status).toBe(200);
      await waitFor("the drain on screen", async () => /top-node\/sim-1\s+drained/.test(screen()), 5_000);
      tmux("send-keys", "-t", "top", "q");
      const after = await waitFor("top to exit", async () => (screen().includes("TOP-EXITED") ? screen() : null), 5_000);
      expect(after).toContain("TOP-EXITED 0");
      // The alternate screen is gone: the frame is no longer on the terminal.
      expect(after).not.toContain("WORKER");
    } finally {
      tmux("kill-server");
      await herd?.stop();
      cleanup(dir);
    }
  }, 90_000);
});

