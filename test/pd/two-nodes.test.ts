// P/D split across two "nodes": two network namespaces (ip netns + veth), each running one prefill
// and one decode sim-engine process with the flags and environment herd gives P/D workers
// (engine-flags.ts; VLLM_NIXL_SIDE_CHANNEL_HOST = the node's address on the node-to-node link). The
// orchestrator runs in the root namespace; a cross-node pair pulls the KV bytes over the A–B link.
// Needs root and iproute2; skipped (with a reason) otherwise.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { resolve } from "node:path";
import { RealClock } from "../../src/core/clock.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { pdEngineFlags } from "../../src/pd/engine-flags.ts";
import { runPd } from "../../src/pd/orchestrator.ts";
import { peer, requirePeers } from "../helpers/peers.ts";
import { type Committed, FetchRunner, pdRouter, pdWorker } from "./helpers.ts";

const MAIN = resolve(import.meta.dir, "../../src/engine/sim/main.ts");
const canRun = process.getuid?.() === 0 && peer("iproute2", ["ip", "netns", "list"]);
const tag = String(process.pid % 10000);
const octet = 100 + (process.pid % 150);
const NS = { a: `herdpd-a-${tag}`, b: `herdpd-b-${tag}` };
const IP = { rootA: `10.${octet}.1.1`, a: `10.${octet}.1.2`, rootB: `10.${octet}.2.1`, b: `10.${octet}.2.2`, abA: `10.${octet}.3.1`, abB: `10.${octet}.3.2` };
const procs: ChildProcess[] = [];

function sh(...argv: string[]): void {
  const r = spawnSync(argv[0]!, argv.slice(1), { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`${argv.join(" ")}: ${r.stderr}`);
}

function netUp(): void {
  for (const ns of [NS.a, NS.b]) {
    sh("ip", "netns", "add", ns);
    sh("ip", "-n", ns, "link", "set", "lo", "up");
  }
  // root <-> A, root <-> B (the orchestrator's HTTP), A <-> B (the KV side channel).
  const link = (left: string, right: string, leftNs: string | null, rightNs: string, leftIp: string | null, rightIp: string) => {
    sh("ip", "link", "add", left, "type", "veth", "peer", "name", right);
    if (leftNs) sh("ip", "link", "set", left, "netns", leftNs);
    sh("ip", "link", "set", right, "netns", rightNs);
    const inLeft = leftNs ? ["ip", "-n", leftNs] : ["ip"];
    if (leftIp) sh(...inLeft, "addr", "add", `${leftIp}/24`, "dev", left);
    sh(...inLeft, "link", "set", left, "up");
    sh("ip", "-n", rightNs, "addr", "add", `${rightIp}/24`, "dev", right);
    sh("ip", "-n", rightNs, "link", "set", right, "up");
  };
  link(`hpra${tag}`, `hpar${tag}`, null, NS.a, IP.rootA, IP.a);
  link(`hprb${tag}`, `hpbr${tag}`, null, NS.b, IP.rootB, IP.b);
  link(`hpab${tag}`, `hpba${tag}`, NS.a, NS.b, IP.abA, IP.abB);
}

function netDown(): void {
  for (const ns of [NS.a, NS.b]) spawnSync("ip", ["netns", "del", ns]);
}

/** One sim engine in a namespace: HTTP on every address of that node, side channel on the A–B link. */
async function startIn(ns: string, role: "prefill" | "decode", httpPort: number, sideChannelPort: number, advertise: string): Promise<void> {
  const pd = { min_prefill_tokens: 0, nixl_metadata: "none", nixl_metadata_host: "127.0.0.1", nixl_metadata_idle_timeout_ms: 0, kv_load_failure_policy: "fail", prefill_queue_max: 8 } as const;
  const f = pdEngineFlags({ kind: "sim", role, pd, advertise, ports: { sideChannel: { port: sideChannelPort, span: 1 } }, nixlMetadataEndpoint: null });
  const child = spawn("ip", ["netns", "exec", ns, process.execPath, MAIN, "--host", "0.0.0.0", "--port", String(httpPort), "--time-scale", "20", "--kv-bytes-per-block", "65536", ...f.args], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, ...f.env },
  });
  procs.push(child);
  await new Promise<void>((ok, fail) => {
    let out = "";
    child.stdout!.on("data", (b: Buffer) => {
      out += b.toString();
      if (out.includes("Application startup complete.")) ok();
    });
    child.on("exit", (code) => fail(new Error(`sim in ${ns} exited ${code}: ${out}`)));
  });
}

describe.skipIf(!canRun)("P/D across two nodes (network namespaces)", () => {
  beforeAll(async () => {
    netDown();
    netUp();
    await Promise.all([
      startIn(NS.a, "prefill", 8000, 5600, IP.abA),
      startIn(NS.a, "decode", 8001, 5601, IP.abA),
      startIn(NS.b, "prefill", 8000, 5600, IP.abB),
      startIn(NS.b, "decode", 8001, 5601, IP.abB),
    ]);
  });
  afterAll(() => {
    for (const p of procs) p.kill("SIGTERM");
    netDown();
  });

  // Requests herd did not send steer the presets: node A's decode worker and node B's prefill worker are busy.
  const workers = () => [
    pdWorker("nodeA/p0", "prefill", { url: `http://${IP.a}:8000` }),
    pdWorker("nodeA/d0", "decode", { url: `http://${IP.a}:8001` }, { running: 4, waiting: 0 }),
    pdWorker("nodeB/p1", "prefill", { url: `http://${IP.b}:8000` }, { running: 0, waiting: 4 }),
    pdWorker("nodeB/d1", "decode", { url: `http://${IP.b}:8001` }),
  ];
  const PROMPT = Array.from({ length: 2000 }, (_, i) => 300 + i);

  test("prefill on node A, decode on node B: the KV bytes cross the A–B link and count as cached", async () => {
    const exec = new FetchRunner(pdRouter(workers()).router, "x-1");
    const r = await runPd(
      { runner: exec, pd: { min_prefill_tokens: 512, prefill_queue_max: 8 }, prefillQueue: () => [0, 4], rng: new SeededRng(2), clock: new RealClock() },
      { requestId: "x-1", endpoint: "completions", body: { model: "sim", prompt: PROMPT, max_tokens: 5, ignore_eos: true, stream: true, stream_options: { include_usage: true } }, stream: true, route: { model: "sim", sessionId: null, promptTokens: PROMPT.length, blockSize: 16 }, maxTokens: 5, flow: "vllm" },
      new AbortController().signal,
    );
    expect(r.trace.legs.map((l) => `${l.name}@${l.worker}:${l.outcome}`)).toEqual(["prefill@nodeA/p0:done", "decode@nodeB/d1:committed"]);
    expect(exec.sent[1]!.body.kv_transfer_params).toMatchObject({ remote_host: IP.abA, remote_port: 5600 });
    expect((r.outcome as { answer: Committed }).answer.text).toContain(`"cached_tokens":${(125 - 1) * 16}`);
    const pulled = await (await fetch(`http://${IP.b}:8001/metrics`)).text();
    expect(pulled).toContain(`sim_kv_pull_bytes_total ${125 * 65536}`);
    const held = await (await fetch(`http://${IP.a}:8000/metrics`)).text();
    expect(held).toContain("sim_kv_held_blocks 0");
  });
});

if (!canRun && requirePeers) test("two-node P/D needs root and iproute2", () => expect(canRun as boolean).toBe(true));
