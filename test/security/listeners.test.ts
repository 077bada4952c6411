// Safe by default (issue 6, docs/references.md#reliability-R15): with the shipped example config (what install.sh installs as
// /etc/herd/herd.yaml) every socket herd and its engines listen on is on loopback — the frontend
// (which also serves /admin and /metrics), each sim engine's HTTP port and its two KV event sockets
// (PUB + replay ROUTER, which follow vLLM's `tcp://*` unless herd asks the sim for loopback).
// Listeners are read from /proc: socket inodes of every process, matched with /proc/net/tcp{,6}.
import { afterAll, expect, test } from "bun:test";
import { readFileSync, readdirSync, readlinkSync } from "node:fs";
import { join, resolve } from "node:path";
import YAML from "yaml";
import { groupMembers } from "../../src/engine/procfs.ts";
import { cleanup, herdCli, portBase, startHerd, tempDir, until, type HerdProc } from "../ops/helpers.ts";

const EXAMPLE = resolve(import.meta.dir, "../../config/herd.example.yaml");

interface Listener {
  address: string;
  port: number;
  inode: string;
}

/** IPv4 hex in /proc/net/tcp is little-endian per 32-bit word. */
function hexToAddress(hex: string): string {
  const words = hex.match(/.{8}/g)!.map((w) => w.match(/../g)!.reverse().join(""));
  if (words.length === 1) return words[0]!.match(/../g)!.map((b) => parseInt(b, 16)).join(".");
  const v6 = words.join("").match(/.{4}/g)!.map((g) => g.replace(/^0+(?=.)/, "")).join(":");
  return v6 === "0:0:0:0:0:0:0:1" ? "::1" : v6 === "0:0:0:0:0:0:0:0" ? "::" : v6.startsWith("0:0:0:0:0:ffff:") ? `::ffff:${v6}` : v6;
}

function listening(): Map<string, Listener> {
  const out = new Map<string, Listener>();
  for (const file of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text = "";
    try {
      text = readFileSync(file, "utf8");
    } catch {
      continue;
    }
    for (const line of text.trim().split("\n").slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f[3] !== "0A") continue; // LISTEN
      const [addr, port] = f[1]!.split(":") as [string, string];
      out.set(f[9]!, { address: hexToAddress(addr), port: parseInt(port, 16), inode: f[9]! });
    }
  }
  return out;
}

function socketInodes(pid: number): string[] {
  try {
    return readdirSync(`/proc/${pid}/fd`).flatMap((fd) => {
      try {
        const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
        return m ? [m[1]!] : [];
      } catch {
        return [];
      }
    });
  } catch {
    return [];
  }
}

const isLoopback = (a: string) => /^127\./.test(a) || a === "::1" || /^::ffff:127\./.test(a);

const dir = tempDir("herd-listeners-");
let herd: HerdProc | null = null;
afterAll(async () => {
  await herd?.stop();
  cleanup(dir);
});

test("with the shipped example config, herd and its engines listen on loopback only (frontend, engine HTTP, KV PUB + replay)", async () => {
  const cfg = YAML.parse(readFileSync(EXAMPLE, "utf8"));
  // Only what a test needs changed: state in a temp dir, free ports. Hosts stay as shipped.
  cfg.node.data_dir = join(dir, "data");
  cfg.supervisor = { ...(cfg.supervisor ?? {}), port_range_start: portBase() };
  const listenHost = String(cfg.frontend.listen).replace(/:\d+$/, "");
  herd = await startHerd(dir, YAML.stringify(cfg), ["--listen", `${listenHost}:0`]);
  const h = herd;
  let workers: { id: string; pid: number; url: string; state: string; kv_events: { endpoint: string; replay_endpoint: string } | null }[] = [];
  await until("every worker ready", async () => {
    const r = await herdCli(["status", "--json", "--url", h.url]);
    workers = r.code === 0 ? JSON.parse(r.out).workers : [];
    return workers.length > 0 && workers.every((w) => w.state === "ready");
  }, 20_000);

  const pids = [h.proc.pid, ...workers.flatMap((w) => groupMembers(w.pid).map((m) => m.pid))];
  const table = listening();
  const found = pids.flatMap((pid) => socketInodes(pid).flatMap((i) => (table.has(i) ? [{ ...table.get(i)!, pid }] : [])));
  const ports = new Set(found.map((l) => l.port));

  // The enumeration sees every listener it should (so an empty or partial scan cannot pass).
  const expected = [Number(new URL(h.url).port)];
  for (const w of workers) {
    expected.push(Number(new URL(w.url).port));
    expect(w.kv_events).not.toBeNull();
    expected.push(Number(w.kv_events!.endpoint.split(":").pop()), Number(w.kv_events!.replay_endpoint.split(":").pop()));
  }
  for (const p of expected) expect(ports.has(p)).toBe(true);
  expect(found.filter((l) => !isLoopback(l.address)).map((l) => `${l.address}:${l.port} (pid ${l.pid})`)).toEqual([]);
}, 40_000);
