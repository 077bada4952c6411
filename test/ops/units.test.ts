// Pure parts of the day-2 commands: argument parsing, where herd is (URL resolution), the status
// table, and the startup exposure warnings.
import { describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { defaultConfig } from "../../src/config/load.ts";
import { planEngines } from "../../src/engine/plan.ts";
import { OpsUsageError, parseOpsArgs } from "../../src/ops/args.ts";
import { DEFAULT_ADMIN_URL, OpsError, listenToUrl, resolveTarget, type ClusterView, type WorkerView } from "../../src/ops/client.ts";
import { exposureInfo, exposureWarnings, wildcardKvEndpoints } from "../../src/daemon/exposure.ts";
import { kvSummary, renderStatus } from "../../src/ops/status.ts";
import { cleanup, tempDir } from "./helpers.ts";

const spec = { values: ["url", "lines"], bools: ["json"], short: { n: "lines" }, maxPositionals: 1 } as const;

describe("parseOpsArgs", () => {
  test("values, booleans, short -n forms, positionals, --", () => {
    const a = parseOpsArgs(["w1", "--url=http://x", "--json", "-n", "5"], spec);
    expect(a.values).toEqual({ url: "http://x", lines: "5" });
    expect([...a.bools]).toEqual(["json"]);
    expect(a.positionals).toEqual(["w1"]);
    expect(parseOpsArgs(["-n7"], spec).values.lines).toBe("7");
    expect(parseOpsArgs(["-n=8"], spec).values.lines).toBe("8");
    expect(parseOpsArgs(["--", "--weird-id"], spec).positionals).toEqual(["--weird-id"]);
    expect(parseOpsArgs(["a", "b", "--help"], spec).help).toBe(true); // --help wins over extra arguments
  });

  test("bad usage is an OpsUsageError naming the problem", () => {
    const bad: [string[], RegExp][] = [
      [["--nope"], /unknown flag --nope/],
      [["-x"], /unknown flag -x/],
      [["--json=1"], /--json takes no value/],
      [["--url"], /--url needs a value/],
      [["a", "b"], /unexpected argument "b"/],
    ];
    for (const [argv, re] of bad) {
      expect(() => parseOpsArgs(argv, spec)).toThrow(OpsUsageError);
      expect(() => parseOpsArgs(argv, spec)).toThrow(re);
    }
  });
});

describe("where herd is", () => {
  test("listenToUrl dials wildcards on loopback, keeps IPv6 brackets, refuses port 0", () => {
    expect(listenToUrl("127.0.0.1:8000")).toBe("http://127.0.0.1:8000");
    expect(listenToUrl("0.0.0.0:8000")).toBe("http://127.0.0.1:8000");
    expect(listenToUrl("[::]:8000")).toBe("http://[::1]:8000");
    expect(listenToUrl("[::1]:9")).toBe("http://[::1]:9");
    expect(listenToUrl("10.1.2.3:80")).toBe("http://10.1.2.3:80");
    expect(() => listenToUrl("127.0.0.1:0")).toThrow(/port 0/);
  });

  test("--url beats --config beats the default; the token comes from --token, else HERD_ADMIN_TOKEN", async () => {
    const dir = tempDir("herd-target-");
    try {
      const cfg = join(dir, "h.yaml");
      writeFileSync(cfg, 'frontend: { listen: "0.0.0.0:8123" }\n');
      expect(await resolveTarget({}, {})).toEqual({ url: DEFAULT_ADMIN_URL, token: null, source: "default" });
      expect(await resolveTarget({ config: cfg }, { HERD_ADMIN_TOKEN: "e" })).toEqual({ url: "http://127.0.0.1:8123", token: "e", source: `--config ${cfg}` });
      expect(await resolveTarget({ config: cfg, url: "10.0.0.2:8000/", token: "t" }, { HERD_ADMIN_TOKEN: "e" })).toEqual({ url: "http://10.0.0.2:8000", token: "t", source: "--url" });
      await expect(resolveTarget({ config: join(dir, "missing.yaml") }, {})).rejects.toThrow(OpsError);
      await expect(resolveTarget({ url: "http://" }, {})).rejects.toThrow(/--url: not a URL/);
    } finally {
      cleanup(dir);
    }
  });
});

const worker = (over: Partial<WorkerView> = {}): WorkerView => ({
  id: "n1/sim-0",
  node: "n1",
  model: "m",
  role: "aggregated",
  kind: "sim",
  url: "http://127.0.0.1:20000",
  state: "ready",
  load: { in_flight: 3, running: 2, waiting: 1, kv_usage: 0.456, scraped_at_ms: 1 },
  restarts: 4,
  pid: 4242,
  kv_events: null,
  ...over,
});

describe("status table", () => {
  test("header, aligned columns, dashes for unknown figures", () => {
    const view: ClusterView = {
      node: "n1",
      policy: "kv",
      draining: true,
      in_flight: 3,
      workers: [worker(), worker({ id: "n1/vllm-10", state: "starting", load: { in_flight: 0, running: null, waiting: null, kv_usage: null, scraped_at_ms: null }, pid: null, restarts: 0 })],
    };
    const lines = renderStatus(view).split("\n");
    expect(lines[0]).toBe("node n1  policy kv  workers 1/2 ready  in-flight 3  DRAINING (shutting down)");
    expect(lines[1]).toBe("WORKER      STATE     ROLE        MODEL  IN-FLIGHT  RUNNING  WAITING  KV   RESTARTS  PID   KV EVENTS");
    expect(lines[2]).toBe("n1/sim-0    ready     aggregated  m      3          2        1        46%  4         4242  -");
    expect(lines[3]).toBe("n1/vllm-10  starting  aggregated  m      0          -        -        -    0         -     -");
    expect(renderStatus({ node: "n", policy: "random", workers: [] })).toBe("node n  policy random  workers 0/0 ready\n(no workers)");
  });

  test("cluster: discovery, leader and term, one row per node with the leader marked", () => {
    const view: ClusterView = {
      node: "a",
      policy: "kv",
      discovery: "peers",
      leader: "b",
      term: 3,
      nodes: [
        { name: "a", address: "10.0.0.11:8000", state: "alive", last_seen_ms: 0 },
        { name: "b", address: "10.0.0.12:8000", state: "suspect", last_seen_ms: 1834.6 },
      ],
      workers: [worker({ id: "b/sim-0", node: "b", url: "http://10.0.0.12:8000" })],
    };
    const lines = renderStatus(view).split("\n");
    expect(lines.slice(0, 6)).toEqual([
      "node a  policy kv  workers 1/1 ready",
      "cluster peers  leader b  term 3  nodes 2",
      "NODE        ADDRESS         STATE    LAST SEEN",
      "a           10.0.0.11:8000  alive    0 ms ago",
      "b (leader)  10.0.0.12:8000  suspect  1835 ms ago",
      "",
    ]);
    expect(lines[6]).toStartWith("WORKER");
    expect(lines[7]).toStartWith("b/sim-0");
    expect(renderStatus({ ...view, leader: null, nodes: [], workers: [] })).toBe("node a  policy kv  workers 0/0 ready\ncluster peers  leader (none)  term 3  nodes 0\n(no workers)");
    // Issue 21: a node cut off from etcd / the voters says so on the cluster line.
    expect(renderStatus({ ...view, leader: null, view_stale: true, is_leader: false, workers: [] }).split("\n")[1]).toBe(
      "cluster peers  leader (none)  term 3  nodes 2  VIEW STALE (cannot reach etcd / a quorum: local workers first)",
    );
  });

  test("KV event stream summary: connection, sequence, blocks, trouble counters only when non-zero", () => {
    const kv = {
      endpoint: "tcp://127.0.0.1:1",
      replay_endpoint: null,
      topic: "t",
      connected: true,
      last_seq: "812",
      batches: 9,
      events: 20,
      gaps: 0,
      replays: 0,
      replay_failures: 0,
      resyncs: 0,
      restarts: 0,
      duplicates: 0,
      pending_batches: 0,
      decode_errors: 0,
      skipped: 0,
      blocks: 5210,
      reattached: 0,
    };
    expect(kvSummary(kv)).toBe("connected, seq 812, 5210 blocks");
    expect(kvSummary({ ...kv, connected: false, last_seq: null, gaps: 2, decode_errors: 1 })).toBe("disconnected, 5210 blocks, 2 gaps, 1 decode errors");
    expect(kvSummary(null)).toBe("-");
  });
});

describe("exposure warnings", () => {
  const base = () => defaultConfig({ hostname: "n1", dataDir: "/tmp/herd-exp" });
  const plansOf = (c: ReturnType<typeof base>) => planEngines(c, { self: ["/usr/local/bin/herd"], isPortFree: () => true });

  test("the default config (loopback sim engines) exposes nothing", () => {
    const c = base();
    expect(exposureWarnings(c, plansOf(c))).toEqual([]);
  });

  test("an open OpenAI API beyond loopback and vLLM's wildcard KV sockets are named", () => {
    const c = base();
    c.frontend.listen = "0.0.0.0:8000";
    c.engines = [{ ...c.engines[0]!, kind: "vllm", count: 1 }];
    const plans = plansOf(c);
    expect(wildcardKvEndpoints(plans[0]!)).toEqual(["tcp://*:20001", "tcp://*:20002"]);
    const w = exposureWarnings(c, plans);
    expect(w).toHaveLength(3);
    expect(w[0]).toContain("frontend.listen 0.0.0.0:8000 is reachable from other hosts and frontend.api_keys is empty");
    // issue 10: an open /metrics beyond loopback is named too (frontend.metrics: open, the default)
    expect(w[1]).toContain("/metrics on 0.0.0.0:8000 is open to anyone who can reach it");
    expect(w[2]).toContain("worker n1/vllm-0 (vllm) binds its KV event sockets on every interface (tcp://*:20001, tcp://*:20002)");
    c.frontend.api_keys = ["k"];
    expect(exposureWarnings(c, plans)[0]).toContain("is reachable from other hosts as plain HTTP: bearer keys, prompts and completions cross the network in clear");
    c.frontend.tls = { cert: "/c.pem", key: "/k.pem", ca: "" };
    expect(exposureWarnings(c, plans)).toHaveLength(2);
    c.frontend.metrics = "loopback";
    expect(exposureWarnings(c, plans)).toHaveLength(1);
  });

  test("issue 22: a multi-host peer API without mutual TLS is named; with cluster.tls it is an info line", () => {
    const c = base();
    c.engines = [];
    c.frontend.listen = "10.0.0.1:8000";
    c.frontend.api_keys = ["k"];
    c.frontend.tls = { cert: "/c.pem", key: "/k.pem", ca: "" }; // the frontend's own exposure is not under test here
    c.frontend.metrics = "loopback";
    expect(exposureWarnings(c, [])).toEqual([]); // the default one-node file cluster: nobody can join
    c.cluster.discovery = "peers";
    expect(exposureWarnings(c, [])).toEqual([expect.stringContaining("cluster peer API on 10.0.0.1:8000 carries prompts, completions and KV between hosts as plain HTTP")]);
    c.cluster.listen = "10.0.0.1:8443";
    c.cluster.tls = { cert: "/c.pem", key: "/k.pem", ca: "/ca.pem" };
    expect(exposureWarnings(c, [])).toEqual([]);
    expect(exposureInfo(c)).toContain("cluster peer API on 10.0.0.1:8443: mutual TLS (cluster.tls)");
  });
});
