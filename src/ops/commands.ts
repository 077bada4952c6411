// Day-2 commands, each a client of the running herd's admin API (client.ts):
//   herd status [--json]                  cluster (leader, term, nodes) and workers: state, role, load, restarts, KV events
//   herd drain WORKER | --node            stop routing new requests to a worker (or all); in-flight finish
//   herd undrain WORKER | --node          put them back into rotation
//   herd logs WORKER [-n N]               the tail of the engine's captured output
//   herd planner status [--json]          the planner: desired vs actual per pool, reasons, held requests
//   herd top [--interval-ms N]            live view of the workers and request rates (q to quit)
// Exit codes: 0 done, 1 herd unreachable or the call refused, 2 usage error.
import { errorMessage } from "../core/errors.ts";
import { OpsUsageError, parseOpsArgs, type OpsArgs, type OpsFlagSpec } from "./args.ts";
import { AdminClient, OpsError, resolveTarget } from "./client.ts";
import { renderStatus } from "./status.ts";
import { renderPlanner, type PlannerView } from "./planner.ts";
import { runTop } from "./top.ts";
import { RealClock, wallClockMs } from "../core/clock.ts";

export interface OpsIo {
  out(text: string): void;
  err(text: string): void;
}

const TARGET_OPTIONS = [
  "  --url URL        herd's listener, e.g. http://127.0.0.1:8000",
  "  --config FILE    the herd started with this config (e.g. /etc/herd/herd.yaml): the address in",
  "                   its data dir's runtime file, else its frontend.listen",
  "  --token TOKEN    admin token for calls from another host (default: $HERD_ADMIN_TOKEN)",
  "  -h, --help       this help",
];

const TARGET_HELP = [
  "Without --url or --config, herd is found from the runtime file (run/herd.json) that a running",
  "herd writes in its data dir — the default data dir, or /var/lib/herd — so the address",
  "`herd run --listen` used is found too; with none, http://127.0.0.1:8000.",
];

interface OpsCommand {
  name: string;
  /** The title line's text after "herd NAME: ". */
  title: string;
  usage: string;
  about: string[];
  /** The command's own options (target options follow). */
  options: string[];
  flags: OpsFlagSpec;
  run(a: OpsArgs, client: AdminClient, io: OpsIo): Promise<number>;
}

const TARGET_FLAGS = ["url", "config", "token"] as const;

const status: OpsCommand = {
  name: "status",
  title: "the cluster's nodes, leader and term; workers: state, role, load, restarts, KV events (--json for scripts)",
  usage: "herd status [--json] [--url URL | --config FILE] [--token TOKEN]",
  about: [
    "The cluster as this node sees it: discovery backend, leader, term and every node (address,",
    "state, last heard from); then every worker this node routes to, its own and other nodes':",
    "state, role, model, load (herd's in-flight; the engine's running, waiting and KV cache use),",
    "restarts, engine pid and the KV event stream.",
  ],
  options: ["  --json           the admin API's JSON as is (for scripts)"],
  flags: { values: TARGET_FLAGS, bools: ["json"], maxPositionals: 0 },
  async run(a, client, io) {
    const view = await client.cluster();
    io.out(a.bools.has("json") ? JSON.stringify(view, null, 2) : renderStatus(view));
    return 0;
  },
};

function drainCommand(drained: boolean): OpsCommand {
  const name = drained ? "drain" : "undrain";
  return {
    name,
    title: drained
      ? "take a worker (or --node: all) out of rotation; in-flight requests finish"
      : "put a drained worker (or --node: all) back into rotation",
    usage: `herd ${name} WORKER | --node [--url URL | --config FILE] [--token TOKEN]`,
    options: [`  --node           every worker of this node`, "  WORKER           a worker id as `herd status` lists it (NODE/NAME), or just NAME when unique"],
    about: drained
      ? [
          "Take a worker (or, with --node, every worker of this node) out of rotation: it gets no",
          "new requests, and requests already on it finish. It stays drained across engine health",
          "changes and restarts until `herd undrain`. herd itself keeps running.",
        ]
      : ["Put a drained worker (or, with --node, every worker of this node) back into rotation."],
    flags: { values: TARGET_FLAGS, bools: ["node"], maxPositionals: 1 },
    async run(a, client, io) {
      const node = a.bools.has("node");
      const one = a.positionals[0];
      if (node === (one !== undefined)) throw new OpsUsageError("name one WORKER or pass --node");
      const ids = node ? (await client.cluster()).workers.map((w) => w.id) : [await resolveWorker(client, one!)];
      if (ids.length === 0) io.err(`herd ${name}: this node has no workers`);
      for (const id of ids) {
        const r = await client.setDrained(id, drained);
        io.out(`${id}: ${drained ? "drained" : "undrained"} (state ${r.state ?? "unknown"})`);
      }
      return 0;
    },
  };
}

const logs: OpsCommand = {
  name: "logs",
  title: "the tail of a worker's engine output",
  usage: "herd logs WORKER [-n N] [--url URL | --config FILE] [--token TOKEN]",
  about: [
    "The last lines of a worker's engine output (stdout and stderr, as herd captured them; the",
    "full log is in node.data_dir/logs/). The tail herd keeps is supervisor.log_tail_lines long.",
  ],
  options: ["  -n, --lines N    lines to show (default 200, at most 10000)"],
  flags: { values: [...TARGET_FLAGS, "lines"], bools: [], short: { n: "lines" }, maxPositionals: 1 },
  async run(a, client, io) {
    const id = a.positionals[0];
    if (id === undefined) throw new OpsUsageError("missing argument WORKER");
    const raw = a.values.lines ?? "200";
    const n = Number(raw);
    if (!Number.isInteger(n) || n < 1 || n > 10_000) throw new OpsUsageError(`-n: expected a whole number 1..10000, got ${JSON.stringify(raw)}`);
    const r = await client.logs(await resolveWorker(client, id), n);
    if (r.lines.length) io.out(r.lines.join("\n"));
    return 0;
  },
};

/**
 * A worker id as typed: the full `NODE/NAME`, or just `NAME` (e.g. `sim-0`) when exactly one of this
 * node's workers ends with it — so commands need not spell the host name. Several matches is a usage
 * error naming them; none is left to the admin API's own "unknown worker" answer.
 */
export async function resolveWorker(client: AdminClient, typed: string): Promise<string> {
  if (typed.includes("/")) return typed;
  const matches = (await client.cluster()).workers.map((w) => w.id).filter((id) => id.endsWith(`/${typed}`));
  if (matches.length > 1) throw new OpsUsageError(`${typed} matches several workers (${matches.join(", ")}); give the full id`);
  return matches[0] ?? typed;
}


const plannerStatus: OpsCommand = {
  name: "planner status",
  title: "the planner's pools: desired vs actual engines, last reasons, held requests (--json for scripts)",
  usage: "herd planner status [--json] [--url URL | --config FILE] [--token TOKEN]",
  about: [
    "The planner on this node: per pool, the engines it wants (desired) and has (ready, starting,",
    "waking, sleeping, draining), the last decision's reason and the figures it read, requests held",
    "for a ready engine and the predicted wait, then the recent actions.",
  ],
  options: ["  --json           the admin API's JSON as is (for scripts)"],
  flags: { values: TARGET_FLAGS, bools: ["json"], maxPositionals: 0 },
  async run(a, client, io) {
    const view = await client.planner<PlannerView>();
    io.out(a.bools.has("json") ? JSON.stringify(view, null, 2) : renderPlanner(view));
    return 0;
  },
};

const top: OpsCommand = {
  name: "top",
  title: "a live view of this node's workers and request rates (q or Ctrl-C to quit)",
  usage: "herd top [--interval-ms N] [--url URL | --config FILE] [--token TOKEN]",
  about: [
    "Redraws every interval: node, leader and term; requests per second over the last 10 and 60 s,",
    "5xx, TTFT/ITL/E2E percentiles (from the decision records of GET /admin/requests); per worker:",
    "state (drained when an operator drained it), in flight, running/waiting, KV use, requests per",
    "second, prefix hit rate, TTFT p95, errors and restarts over the last minute.",
  ],
  options: ["  --interval-ms N  redraw interval (default 1000)", "  --frames N       stop after N frames (default: until q)"],
  flags: { values: [...TARGET_FLAGS, "interval-ms", "frames"], bools: [], maxPositionals: 0 },
  async run(a, client, io) {
    const int = (name: string, dflt: number | null) => {
      const v = a.values[name];
      if (v === undefined) return dflt;
      const n = Number(v);
      if (!Number.isInteger(n) || n < 1) throw new OpsUsageError(`--${name}: a positive integer`);
      return n;
    };
    const stdin = process.stdin;
    const term = {
      write: (t: string) => void process.stdout.write(t),
      onKey(fn: (k: string) => void) {
        if (!stdin.isTTY) return () => {};
        stdin.setRawMode(true);
        const on = (d: Buffer) => fn(d.toString());
        stdin.on("data", on);
        stdin.resume();
        return () => {
          stdin.off("data", on);
          stdin.setRawMode(false);
          stdin.pause();
        };
      },
    };
    void io;
    return runTop(client, term, new RealClock(), wallClockMs, { intervalMs: int("interval-ms", 1000)!, frames: int("frames", null), ansi: process.stdout.isTTY === true });
  },
};

export const OPS_COMMANDS = { status, drain: drainCommand(true), undrain: drainCommand(false), logs, "planner status": plannerStatus, top } as const;
export type OpsCommandName = keyof typeof OPS_COMMANDS;

/** The same layout as every herd command's help: title line, Usage:, description, Options:. */
export function opsHelp(c: OpsCommand): string {
  return [`herd ${c.name}: ${c.title}`, "", `Usage: ${c.usage}`, "", ...c.about, "", "Options:", ...c.options, ...TARGET_OPTIONS, "", ...TARGET_HELP].join("\n");
}

/** Run one day-2 command with argv after its name; returns the exit code. */
export async function opsMain(name: OpsCommandName, argv: readonly string[], io: OpsIo): Promise<number> {
  const c: OpsCommand = OPS_COMMANDS[name];
  const help = opsHelp(c);
  try {
    const a = parseOpsArgs(argv, c.flags);
    if (a.help) {
      io.out(help);
      return 0;
    }
    const client = new AdminClient(await resolveTarget(a.values));
    return await c.run(a, client, io);
  } catch (e) {
    if (e instanceof OpsUsageError) {
      io.err(`herd ${c.name}: ${e.message}\nUsage: ${c.usage}\nRun \`herd ${c.name} --help\` for details.`);
      return 2;
    }
    io.err(`herd ${c.name}: ${e instanceof OpsError ? e.message : errorMessage(e)}`);
    return 1;
  }
}
