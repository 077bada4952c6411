// Three herd nodes in their own network namespaces (issue 21), for fault tests with real links:
// every pair of nodes has its own veth link (so one pair can be cut while both still reach the
// third: the asymmetric cut), and the root namespace (the test's client) has one link to each node.
// Each node's address is a /32 on its loopback, routed over the pair links, so cutting a link
// (`ip link set … down` on one end) turns the other end's route into a black hole: packets to it are
// dropped, connections pooled across it hang — what a real partition looks like to a node.
// Names carry the test process's pid (unique per run); only the test's own namespaces are touched.
import { spawnSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { BUN, ROOT, readLines } from "../../helpers/herd.ts";

export const NODE_NAMES = ["n1", "n2", "n3"] as const;
export type NodeName = (typeof NODE_NAMES)[number];

function sh(...argv: string[]): void {
  const r = spawnSync(argv[0]!, argv.slice(1), { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`${argv.join(" ")}: ${r.stderr}`);
}

export class NetnsCluster {
  readonly tag: string;
  private readonly octet: number;
  readonly port: number;
  private readonly procs = new Map<NodeName, ReturnType<typeof Bun.spawn>>();
  private readonly logs = new Map<NodeName, string>();

  /** `variant` (0–9) tells apart two clusters of one test run. */
  constructor(
    readonly dir: string,
    variant = 0,
  ) {
    this.tag = `${process.pid % 10000}${variant}`;
    this.octet = 16 + ((process.pid + 7 * variant) % 200);
    this.port = 18_000 + ((process.pid + 100 * variant) % 2000);
  }

  ns(n: NodeName): string {
    return `h21-${this.tag}-${n}`;
  }
  idx(n: NodeName): number {
    return NODE_NAMES.indexOf(n) + 1;
  }
  /** The node's address: peers and the client reach it here. */
  addr(n: NodeName): string {
    return `10.${this.octet}.0.${this.idx(n)}`;
  }
  url(n: NodeName): string {
    return `http://${this.addr(n)}:${this.port}`;
  }
  /** The veth end inside `a`'s namespace on the a–b link (`b` may be "root"). */
  private dev(a: string, b: string): string {
    return `h${this.tag}${a.slice(-1)}${b === "root" ? "r" : b.slice(-1)}`;
  }

  up(): void {
    this.down();
    const o = this.octet;
    sh("ip", "addr", "add", `${this.serviceAddr}/32`, "dev", "lo");
    for (const n of NODE_NAMES) {
      sh("ip", "netns", "add", this.ns(n));
      sh("ip", "-n", this.ns(n), "link", "set", "lo", "up");
      sh("ip", "-n", this.ns(n), "addr", "add", `${this.addr(n)}/32`, "dev", "lo");
      // root <-> node: 10.o.(10+i).1 (root) / .2 (node)
      const i = this.idx(n);
      const [r, x] = [`h${this.tag}r${i}`, this.dev(n, "root")];
      sh("ip", "link", "add", r, "type", "veth", "peer", "name", x);
      sh("ip", "link", "set", x, "netns", this.ns(n));
      sh("ip", "addr", "add", `10.${o}.${10 + i}.1/24`, "dev", r);
      sh("ip", "link", "set", r, "up");
      sh("ip", "-n", this.ns(n), "addr", "add", `10.${o}.${10 + i}.2/24`, "dev", x);
      sh("ip", "-n", this.ns(n), "link", "set", x, "up");
      sh("ip", "route", "add", `${this.addr(n)}/32`, "via", `10.${o}.${10 + i}.2`);
      sh("ip", "-n", this.ns(n), "route", "add", `${this.serviceAddr}/32`, "via", `10.${o}.${10 + i}.1`);
    }
    for (let a = 0; a < 3; a++)
      for (let b = a + 1; b < 3; b++) {
        const [na, nb] = [NODE_NAMES[a]!, NODE_NAMES[b]!];
        const net = `10.${o}.${100 + 10 * (a + 1) + (b + 1)}`;
        const [da, db] = [this.dev(na, nb), this.dev(nb, na)];
        sh("ip", "link", "add", da, "type", "veth", "peer", "name", db);
        sh("ip", "link", "set", da, "netns", this.ns(na));
        sh("ip", "link", "set", db, "netns", this.ns(nb));
        sh("ip", "-n", this.ns(na), "addr", "add", `${net}.1/24`, "dev", da);
        sh("ip", "-n", this.ns(nb), "addr", "add", `${net}.2/24`, "dev", db);
        sh("ip", "-n", this.ns(na), "link", "set", da, "up");
        sh("ip", "-n", this.ns(nb), "link", "set", db, "up");
        sh("ip", "-n", this.ns(na), "route", "add", `${this.addr(nb)}/32`, "via", `${net}.2`);
        sh("ip", "-n", this.ns(nb), "route", "add", `${this.addr(na)}/32`, "via", `${net}.1`);
      }
  }

  /**
   * An address in the root namespace every node reaches over its client link (e.g. for etcd), on
   * its own so it can be blackholed for one node without cutting that node's clients. Added to
   * the root namespace's loopback by up(), removed by down().
   */
  get serviceAddr(): string {
    return `10.${this.octet}.200.1`;
  }

  down(): void {
    spawnSync("ip", ["addr", "del", `${this.serviceAddr}/32`, "dev", "lo"]);
    for (const n of NODE_NAMES) spawnSync("ip", ["netns", "del", this.ns(n)]);
    for (let i = 1; i <= 3; i++) spawnSync("ip", ["link", "del", `h${this.tag}r${i}`]);
  }

  /** Cut (or heal) the a–b link: `b`'s end goes down, so a's packets to b are dropped. */
  link(a: NodeName, b: NodeName | "root", up: boolean): void {
    const dev = b === "root" ? this.dev(a, "root") : this.dev(b, a);
    sh("ip", "-n", this.ns(b === "root" ? a : b), "link", "set", dev, up ? "up" : "down");
    if (up && b !== "root") {
      // a link brought back up has lost its routes; put them back
      const [x, y] = NODE_NAMES.indexOf(a) < NODE_NAMES.indexOf(b) ? [a, b] : [b, a];
      const net = `10.${this.octet}.${100 + 10 * this.idx(x) + this.idx(y)}`;
      const other = b === y ? x : y;
      spawnSync("ip", ["-n", this.ns(b), "route", "replace", `${this.addr(other)}/32`, "via", `${net}.${b === x ? 2 : 1}`]);
    }
  }

  /** Cut every link between `n` and the other nodes (the client's link stays). */
  isolate(n: NodeName, up: boolean): void {
    for (const m of NODE_NAMES) if (m !== n) this.link(n, m, up);
  }

  /** Drop (or stop dropping) everything `n` sends to `addr` (a blackhole route: e.g. etcd). */
  blackhole(n: NodeName, addr: string, on: boolean): void {
    // The blackhole replaces the node's route to `addr` (over its client link); off puts that back.
    if (on) sh("ip", "-n", this.ns(n), "route", "replace", "blackhole", `${addr}/32`);
    else sh("ip", "-n", this.ns(n), "route", "replace", `${addr}/32`, "via", this.rootAddr(n));
  }

  /** The root namespace's address on n's link (where a service in the root namespace is reached). */
  rootAddr(n: NodeName): string {
    return `10.${this.octet}.${10 + this.idx(n)}.1`;
  }

  /** Start herd in n's namespace with `yaml` (its engines are children in its process group). */
  async start(n: NodeName, yaml: string): Promise<void> {
    const d = join(this.dir, n);
    mkdirSync(d, { recursive: true });
    const cfg = join(d, "herd.yaml");
    await Bun.write(cfg, yaml);
    const proc = Bun.spawn(["ip", "netns", "exec", this.ns(n), BUN, "src/cli.ts", "run", "--config", cfg, "--listen", `0.0.0.0:${this.port}`], {
      cwd: ROOT, stdout: "pipe", stderr: "pipe", stdin: "ignore", detached: true,
    });
    this.procs.set(n, proc);
    this.logs.set(n, "");
    const add = (l: string) => this.logs.set(n, (this.logs.get(n) ?? "").slice(-20_000) + l + "\n");
    void readLines(proc.stdout as ReadableStream<Uint8Array>, add);
    void readLines(proc.stderr as ReadableStream<Uint8Array>, add);
  }

  log(n: NodeName): string {
    return this.logs.get(n) ?? "";
  }

  /** kill -9 of the node: herd and its engines (its process group), as if the host died. */
  kill9(n: NodeName): void {
    const p = this.procs.get(n);
    if (!p) return;
    try {
      process.kill(-p.pid, "SIGKILL");
    } catch {
      p.kill("SIGKILL");
    }
  }

  async stopAll(): Promise<void> {
    for (const [n, p] of this.procs) {
      if (p.exitCode === null) p.kill("SIGTERM");
      const t = setTimeout(() => this.kill9(n), 5000);
      await p.exited;
      clearTimeout(t);
      this.kill9(n);
    }
    // Whatever still runs in the namespaces (engines in their own process groups): gone with them.
    for (const n of NODE_NAMES) {
      const r = spawnSync("ip", ["netns", "pids", this.ns(n)], { encoding: "utf8" });
      for (const pid of (r.stdout ?? "").split(/\s+/).filter(Boolean))
        try {
          process.kill(Number(pid), "SIGKILL");
        } catch {
          // already gone
        }
    }
  }
}
