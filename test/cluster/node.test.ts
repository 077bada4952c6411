// ClusterNode in process: two nodes over one shared `file` directory (fast heartbeats), each with
// its own WorkerRegistry. Each node's workers appear in the other's registry with node and peer
// URL; load and state follow the owner's advert; a mismatched model card is refused and logged once
// (naming node and field); a node that stops takes its workers out of the other's registry.
import { afterEach, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { RealClock } from "../../src/core/clock.ts";
import { memoryLogger } from "../helpers/log.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { defaultConfig } from "../../src/config/index.ts";
import { ClusterNode } from "../../src/cluster/node.ts";
import { HttpUpstream } from "../../src/request/http-upstream.ts";
import { WorkerRegistry } from "../../src/workers/registry.ts";
import { emptyLoad, type Worker } from "../../src/workers/worker.ts";
import { removeDir, tempDir } from "./harness/cluster.ts";

const TIMING = { heartbeat_ms: 50, dead_after_ms: 400 };
const started: ClusterNode[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const n of started.splice(0)) await n.stop();
  for (const d of dirs.splice(0)) removeDir(d);
});

function node(name: string, shared: string, port: number, blockSize = 16) {
  const config = defaultConfig();
  config.node.name = name;
  config.node.data_dir = join(shared, name);
  config.cluster.discovery = "file";
  config.cluster.file.dir = join(shared, "dir");
  config.cluster.token = "t";
  config.models = [{ ...config.models[0]!, name: "m", block_size: blockSize }];
  const registry = new WorkerRegistry();
  const log = memoryLogger();
  const n = new ClusterNode({
    config, registry, clock: new RealClock(), rng: new SeededRng(port), log, localUpstream: new HttpUpstream(),
    address: () => `127.0.0.1:${port}`, maxBodyBytes: () => 1 << 20, timing: TIMING,
  });
  started.push(n);
  return { n, registry, log };
}

const worker = (id: string, node: string, over: Partial<Worker> = {}): Worker => ({
  id, node, model: "m", role: "aggregated", kind: "sim", url: "http://127.0.0.1:9", state: "ready", load: emptyLoad(), restarts: 0, ...over,
});

async function until<T>(what: string, fn: () => T | null | undefined | false, ms = 5000): Promise<T> {
  const end = performance.now() + ms;
  for (;;) {
    const v = fn();
    if (v) return v;
    if (performance.now() > end) throw new Error(`timed out: ${what}`);
    await Bun.sleep(20);
  }
}

describe("ClusterNode", () => {
  test("each node's workers are pooled by the other with node and peer URL; state and load follow; stop removes them", async () => {
    const dir = tempDir("node");
    dirs.push(dir);
    const a = node("a", dir, 18001);
    const b = node("b", dir, 18002);
    a.registry.upsert(worker("a/sim-0", "a"));
    b.registry.upsert(worker("b/sim-0", "b"));
    await a.n.start();
    await b.n.start();
    const seen = await until("a pools b/sim-0", () => a.registry.get("b/sim-0"));
    expect(seen.node).toBe("b");
    expect(seen.url).toBe("http://127.0.0.1:18002");
    expect(a.n.peerOf("b/sim-0")).toBe("http://127.0.0.1:18002");
    expect(a.n.peerOf("a/sim-0")).toBeNull();
    await until("b pools a/sim-0", () => b.registry.get("a/sim-0"));
    // The owner's state and load reach the other node.
    b.registry.setState("b/sim-0", "draining");
    b.registry.updateLoad("b/sim-0", { running: 7, waiting: 2, kv_usage: 0.25 });
    await until("a sees b's state and load", () => a.registry.get("b/sim-0")?.state === "draining" && a.registry.get("b/sim-0")?.load.running === 7);
    const v = a.n.view();
    expect(v.nodes.map((x) => x.name).sort()).toEqual(["a", "b"]);
    expect(["a", "b"]).toContain(v.leader!);
    // b leaves: its workers leave a's registry.
    await b.n.stop();
    await until("b's worker removed from a", () => !a.registry.get("b/sim-0"));
    expect(a.log.lines.some((l) => l.includes("remote worker removed"))).toBe(true);
  });

  test("a mismatched block size is refused once in the log, naming node and field, and not pooled", async () => {
    const dir = tempDir("node");
    dirs.push(dir);
    const a = node("a", dir, 18011);
    const c = node("c", dir, 18013, 32);
    a.registry.upsert(worker("a/sim-0", "a"));
    c.registry.upsert(worker("c/sim-0", "c"));
    await a.n.start();
    await c.n.start();
    await until("a logs the refusal", () => a.log.lines.find((l) => l.includes("node c: model m has block_size 32 but a has 16")));
    await Bun.sleep(300); // several heartbeats and refreshes later
    expect(a.log.lines.filter((l) => l.includes("node c: model m has block_size 32")).length).toBe(1);
    expect(a.registry.get("c/sim-0")).toBeUndefined();
    expect(a.log.lines.find((l) => l.includes("block_size 32"))).toContain("field");
  });
});
