// Safe by default, KV event sockets: a sim engine on a loopback host is told to bind its KV sockets on
// loopback (--kv-events-bind-host, sim only); the vLLM-compatible JSON stays as vLLM needs it
// (`tcp://*:P`, bound) for every engine kind; real vLLM/SGLang get no extra flag (they would reject
// it), explicit kv_events are passed verbatim. And the sim really binds where it is told.
import { describe, expect, test } from "bun:test";
import { loopbackBindHost } from "../../src/engine/drivers/common.ts";
import { planEngines } from "../../src/engine/plan.ts";
import { withBindHost } from "../../src/engine/sim/main.ts";
import { SimKvPublisher, parseKvEventsConfig } from "../../src/engine/sim/kv-publisher.ts";
import { engine, model, testConfig } from "../fixtures/engines/config.ts";

const plan = (e: Parameters<typeof engine>[0]) =>
  planEngines(testConfig({ models: [model()], engines: [engine(e)], supervisor: { port_range_start: 9000 } }), { self: ["/usr/local/bin/herd"], isPortFree: () => true })[0]!.spec!;

const after = (argv: string[], flag: string) => (argv.includes(flag) ? argv[argv.indexOf(flag) + 1] : undefined);

describe("driver", () => {
  test("loopbackBindHost: 127/8, localhost and ::1 are loopback; wildcards and real addresses are not", () => {
    expect(loopbackBindHost("127.0.0.1")).toBe("127.0.0.1");
    expect(loopbackBindHost("127.3.4.5")).toBe("127.3.4.5");
    expect(loopbackBindHost("localhost")).toBe("127.0.0.1");
    expect(loopbackBindHost("::1")).toBe("::1");
    for (const h of ["0.0.0.0", "*", "::", "10.0.0.4", "gpu-01.internal", "127.0.0.1.nip.io"]) expect(loopbackBindHost(h)).toBeNull();
  });

  test("sim on loopback: the JSON keeps tcp://* and --kv-events-bind-host names the engine's host", () => {
    const s = plan({ kind: "sim", host: "127.0.0.1" });
    expect(JSON.parse(after(s.argv, "--kv-events-config")!).endpoint).toBe("tcp://*:9001");
    expect(after(s.argv, "--kv-events-bind-host")).toBe("127.0.0.1");
    expect(s.kvEvents?.endpoint).toBe("tcp://127.0.0.1:9001");
  });

  test("sim on all interfaces, explicit endpoints, and vLLM/SGLang get no bind-host flag", () => {
    expect(plan({ kind: "sim", host: "0.0.0.0" }).argv).not.toContain("--kv-events-bind-host");
    const explicit = plan({ kind: "sim", host: "127.0.0.1", kv_events: { endpoint: "tcp://*:7001", replay_endpoint: "tcp://*:7002", topic: "t" } });
    expect(explicit.argv).not.toContain("--kv-events-bind-host");
    expect(JSON.parse(after(explicit.argv, "--kv-events-config")!).endpoint).toBe("tcp://*:7001");
    for (const kind of ["vllm", "sglang"] as const) {
      const s = plan({ kind, host: "127.0.0.1" });
      expect(s.argv).not.toContain("--kv-events-bind-host");
      expect(JSON.parse(after(s.argv, "--kv-events-config")!).endpoint).toMatch(/^tcp:\/\/\*:\d+$/);
    }
  });
});

describe("sim publisher", () => {
  test("withBindHost rewrites both endpoints; the publisher binds them on loopback only", async () => {
    const cfg = parseKvEventsConfig(JSON.stringify({ publisher: "zmq", endpoint: "tcp://*:0", replay_endpoint: "tcp://*:0", topic: "t" }))!;
    const local = withBindHost(cfg, "127.0.0.1");
    expect(local.endpoint).toBe("tcp://127.0.0.1:0");
    expect(local.replayEndpoint).toBe("tcp://127.0.0.1:0");
    expect(withBindHost(cfg, "::1").endpoint).toBe("tcp://[::1]:0");
    const pub = new SimKvPublisher({ config: local, encoding: "map", dropFraction: 0, seed: 1, bind: true });
    try {
      expect(pub.endpoint).toMatch(/^tcp:\/\/127\.0\.0\.1:\d+$/);
      expect(pub.replayEndpoint).toMatch(/^tcp:\/\/127\.0\.0\.1:\d+$/);
      const port = Number(pub.endpoint.split(":").pop());
      // Reachable on loopback, and the listening socket is bound to 127.0.0.1, not 0.0.0.0.
      const sock = await Bun.connect({ hostname: "127.0.0.1", port, socket: { data() {} } });
      sock.end();
      const hexPort = port.toString(16).toUpperCase().padStart(4, "0");
      const rows = (await Bun.file("/proc/net/tcp").text()).split("\n").filter((l) => l.includes(`:${hexPort} `) && / 0A /.test(l));
      expect(rows.length).toBeGreaterThan(0);
      for (const r of rows) expect(r.trim().split(/\s+/)[1]).toBe(`0100007F:${hexPort}`);
    } finally {
      pub.close();
    }
  });
});
