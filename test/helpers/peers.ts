// System peers (python3-zmq, etcd, promtool, …) are optional on a developer machine and required in
// CI. `peer(...)` answers whether a test can run: when the peer is missing it prints a one-line skip
// reason, unless HERD_REQUIRE_PEERS=1, where the test must fail instead of silently skipping.
import { spawnSync } from "node:child_process";

export const requirePeers = process.env.HERD_REQUIRE_PEERS === "1";

const cache = new Map<string, boolean>();

/** True when `argv` runs and exits 0 (e.g. ["/usr/bin/python3", "-c", "import zmq"]). */
export function probe(argv: string[]): boolean {
  const key = argv.join("\0");
  let ok = cache.get(key);
  if (ok === undefined) {
    try {
      const r = spawnSync(argv[0]!, argv.slice(1), { stdio: "ignore", timeout: 10_000 });
      ok = r.status === 0;
    } catch {
      ok = false;
    }
    cache.set(key, ok);
  }
  return ok;
}

/**
 * Whether a peer-dependent test should run. Use as `test.skipIf(!peer("python3-zmq", [...]))(…)`.
 * Under HERD_REQUIRE_PEERS=1 a missing peer makes this return true, so the test runs and fails
 * on the missing peer with a clear error.
 */
export function peer(name: string, argv: string[]): boolean {
  if (probe(argv)) return true;
  if (requirePeers) {
    console.error(`peer ${name} is missing but HERD_REQUIRE_PEERS=1: the test will fail`);
    return true;
  }
  console.error(`skip: ${name} not installed (${argv.join(" ")} failed)`);
  return false;
}

export const PYTHON = "/usr/bin/python3";
export const hasPyZmq = () => peer("python3-zmq", [PYTHON, "-c", "import zmq, msgpack"]);
