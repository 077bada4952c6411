// Test harness: three (or more) node processes on loopback, an etcd server, and helpers to wait for
// cluster states and measure failover and removal. Wall-clock values here are measurements and wide
// safety bounds, never the thing under test's own timing.
import { spawn, type Subprocess } from "bun";
import { mkdtempSync, readFileSync, rmSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ClusterView } from "../../../src/cluster/service.ts";
import { freePort } from "../../helpers/ports.ts";

export { freePort };

export interface NodeSpec {
  name: string;
  port: number;
  dataDir: string;
  discovery: "file" | "peers" | "etcd";
  token: string;
  history: string;
  seed: number;
  fileDir?: string;
  seeds?: string[];
  etcd?: string[];
  prefix?: string;
  leaseTtlS?: number;
  dial?: Record<string, string>;
}

const NODE_SCRIPT = join(import.meta.dir, "node.ts");

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
export const now = () => performance.now();

export class TestNode {
  proc: Subprocess | null = null;
  output = "";
  constructor(public spec: NodeSpec) {}

  get address() {
    return `127.0.0.1:${this.spec.port}`;
  }

  async start(): Promise<void> {
    this.proc = spawn(["bun", NODE_SCRIPT], {
      env: { ...process.env, HERD_TEST_NODE: JSON.stringify(this.spec), HERD_LOG: process.env.HERD_TEST_NODE_LOG ?? "error" },
      stdout: "pipe",
      stderr: "inherit",
    });
    const reader = (this.proc.stdout as ReadableStream<Uint8Array>).getReader();
    const dec = new TextDecoder();
    const deadline = now() + 15_000;
    while (!this.output.includes("ready ")) {
      if (now() > deadline) throw new Error(`node ${this.spec.name} did not start`);
      const { value, done } = await reader.read();
      if (done) throw new Error(`node ${this.spec.name} exited at start`);
      this.output += dec.decode(value);
    }
    reader.releaseLock();
  }

  kill(signal: "SIGKILL" | "SIGTERM" | "SIGSTOP" | "SIGCONT" = "SIGKILL"): void {
    this.proc?.kill(signal);
  }

  async stop(): Promise<void> {
    if (!this.proc) return;
    this.proc.kill("SIGKILL");
    await this.proc.exited;
    this.proc = null;
  }

  async killAndWait(): Promise<number> {
    const t = now();
    this.proc?.kill("SIGKILL");
    await this.proc?.exited;
    this.proc = null;
    return t;
  }

  async status(): Promise<ClusterView | null> {
    if (!this.proc) return null;
    try {
      const r = await fetch(`http://${this.address}/test/status`, { signal: AbortSignal.timeout(1000) });
      return r.ok ? ((await r.json()) as ClusterView) : null;
    } catch {
      return null;
    }
  }
}

/** Poll `probe` every 50 ms until it returns a value (not undefined), or throw after `timeoutMs`. */
export async function waitFor<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(50);
  }
}

/** All given nodes report the same leader (not null) and term; returns it. */
export async function agreedLeader(nodes: TestNode[]): Promise<{ leader: string; term: number } | undefined> {
  const views = await Promise.all(nodes.map((n) => n.status()));
  if (views.some((v) => v === null)) return undefined;
  const l = views[0]!.leader;
  const term = views[0]!.term;
  if (l === null || views.some((v) => v!.leader !== l || v!.term !== term)) return undefined;
  const holders = views.filter((v) => v!.is_leader);
  if (holders.length !== 1 || holders[0]!.node !== l) return undefined;
  return { leader: l, term };
}

/** Every given node lists exactly `names` as members. */
export async function membersAre(nodes: TestNode[], names: string[]): Promise<true | undefined> {
  const want = [...names].sort().join(",");
  const views = await Promise.all(nodes.map((n) => n.status()));
  return views.every((v) => v !== null && v.nodes.map((m) => m.name).sort().join(",") === want) ? true : undefined;
}

/** History check: at most one leader per term across every node's history file. */
export function leadersByTerm(history: string): Map<number, Set<string>> {
  const out = new Map<number, Set<string>>();
  if (!existsSync(history)) return out;
  for (const line of readFileSync(history, "utf8").split("\n")) {
    if (line.trim() === "") continue;
    const { name, term } = JSON.parse(line) as { name: string; term: number };
    if (!out.has(term)) out.set(term, new Set());
    out.get(term)!.add(name);
  }
  return out;
}

export function tempDir(tag: string): string {
  return mkdtempSync(join(tmpdir(), `herd-${tag}-`));
}

export function removeDir(d: string): void {
  rmSync(d, { recursive: true, force: true });
}

/** A real etcd on loopback with a temporary data dir (etcd 3.4+: /usr/bin/etcd). */
export class EtcdServer {
  proc: Subprocess | null = null;
  readonly dataDir = tempDir("etcd");
  clientPort = 0;
  peerPort = 0;

  /** `host`: the address etcd listens on (default loopback; a netns test gives one its nodes reach). */
  constructor(readonly host = "127.0.0.1") {}

  get url() {
    return `http://${this.host}:${this.clientPort}`;
  }

  async start(): Promise<void> {
    if (!this.clientPort) {
      this.clientPort = await freePort();
      this.peerPort = await freePort();
    }
    const c = `http://${this.host}:${this.clientPort}`;
    const p = `http://127.0.0.1:${this.peerPort}`;
    this.proc = spawn(
      ["etcd", "--name", "t", "--data-dir", this.dataDir, "--listen-client-urls", c, "--advertise-client-urls", c,
        "--listen-peer-urls", p, "--initial-advertise-peer-urls", p, "--initial-cluster", `t=${p}`],
      { stdout: "ignore", stderr: "ignore" },
    );
    await waitFor("etcd to answer", 20_000, async () => {
      try {
        const r = await fetch(`${c}/v3/maintenance/status`, { method: "POST", body: "{}", signal: AbortSignal.timeout(500) });
        return r.ok ? true : undefined;
      } catch {
        return undefined;
      }
    });
  }

  async stop(): Promise<void> {
    if (!this.proc) return;
    this.proc.kill("SIGKILL");
    await this.proc.exited;
    this.proc = null;
  }

  async destroy(): Promise<void> {
    await this.stop();
    removeDir(this.dataDir);
  }
}
