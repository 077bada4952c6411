// The control plane of the fault simulation: N nodes, each running the REAL peers backend
// (src/cluster/peers.ts: gossip membership + the Raft election of election.ts) and the REAL fenced
// actuation path of the planner (src/planner/assign.ts AssignmentApplier behind a TermFence), over
// the in-memory network (net.ts), each on its own pausable view of the clock (node-clock.ts).
// Durable state (state.json: term, votedFor, incarnation) lives on an in-memory disk that survives
// a node's kill and restart, as a real disk does. The node that believes it leads sends, every
// `assignEveryMs`, one assignment with a unique action to every node (itself included): what the
// cluster planner does with its decisions.
//
// Recorded as they happen, for the invariants (check.ts): every persisted vote (voter, term →
// candidate), every leadership (term → node), every actuation (node, action → count, term).
import type { VirtualClock } from "../../core/clock.ts";
import type { Rng } from "../../core/rng.ts";
import { PeersBackend } from "../../cluster/peers.ts";
import { StateStore, type StateFiles } from "../../cluster/state.ts";
import { TermFence } from "../../cluster/fence.ts";
import { AssignmentApplier, type Assignment } from "../../planner/assign.ts";
import type { Actuator } from "../../planner/actuator.ts";
import type { Action } from "../../planner/types.ts";
import { NodeClock } from "./node-clock.ts";
import type { VirtualNet } from "./net.ts";
import type { EventLog } from "./event-log.ts";
import type { Checker } from "./check.ts";
import { QUIET } from "../quiet.ts";

/** Deliberate bugs, to prove the checker fails (test/simulate/faults.test.ts). Never set in a real run. */
export interface ControlBugs {
  /** The disk loses what was written once the node restarts (votes not durable). */
  forgetVotes?: boolean;
  /** Every assignment is applied by a fresh applier: no memory of applied ids. */
  noDedupe?: boolean;
}

export interface ControlOptions {
  nodes: number;
  timing: { heartbeat_ms: number; dead_after_ms: number };
  election: { heartbeat_ms: number; election_ms: number };
  assignEveryMs: number;
  bugs: ControlBugs;
}

/** One node's disk: files by path; `forget` drops everything at a restart (the bug). */
class MemoryDisk implements StateFiles {
  private readonly files = new Map<string, string>();
  constructor(private readonly onWrite: (data: string) => void) {}
  read(path: string): unknown {
    const s = this.files.get(path);
    return s === undefined ? undefined : JSON.parse(s);
  }
  write(path: string, data: string): void {
    this.files.set(path, data);
    this.onWrite(data);
  }
  wipe(): void {
    this.files.clear();
  }
}

interface NodeProc {
  clock: NodeClock;
  backend: PeersBackend;
  applier: AssignmentApplier;
  fence: TermFence;
  lease: () => { term: number; leader: string } | null;
  local: Actuator;
  seq: number;
}

export class ControlPlane {
  readonly addresses: string[];
  private readonly procs = new Map<string, NodeProc>();
  private readonly disks = new Map<string, MemoryDisk>();
  private readonly rngs = new Map<string, Rng>();

  constructor(
    private readonly clock: VirtualClock,
    private readonly net: VirtualNet,
    rng: Rng,
    private readonly o: ControlOptions,
    private readonly log: EventLog,
    private readonly check: Checker,
  ) {
    this.addresses = Array.from({ length: o.nodes }, (_, i) => `10.0.0.${i + 1}:7000`);
    for (const a of this.addresses) {
      this.rngs.set(a, rng.fork());
      this.disks.set(a, new MemoryDisk((data) => this.persisted(a, data)));
    }
    net.dupPaths = new Set(["assign"]);
  }

  start(): void {
    for (const a of this.addresses) this.boot(a);
  }

  isUp(address: string): boolean {
    return this.procs.has(address);
  }

  isPaused(address: string): boolean {
    return this.procs.get(address)?.clock.isPaused ?? false;
  }

  kill(address: string): void {
    const p = this.procs.get(address);
    if (!p) return;
    p.clock.kill();
    this.net.detach(address);
    this.procs.delete(address);
    if (this.o.bugs.forgetVotes) this.disks.get(address)!.wipe();
  }

  restart(address: string): void {
    if (!this.procs.has(address)) this.boot(address);
  }

  pause(address: string): void {
    this.procs.get(address)?.clock.pause();
  }

  resume(address: string): void {
    this.procs.get(address)?.clock.resume();
  }

  /** Ask every live node for its view (CheckQuorum is evaluated on the call): leader events fire. */
  poll(): void {
    for (const p of this.procs.values()) if (!p.clock.isPaused) p.backend.leader();
  }

  /** Who believes it leads, now (live, unpaused nodes). */
  leaders(): { address: string; term: number }[] {
    const out: { address: string; term: number }[] = [];
    for (const [a, p] of this.procs) {
      if (p.clock.isPaused) continue;
      const v = p.backend.leader();
      if (v.self) out.push({ address: a, term: v.term });
    }
    return out;
  }

  close(): void {
    for (const a of [...this.procs.keys()]) this.kill(a);
  }

  private persisted(address: string, data: string): void {
    const s = JSON.parse(data) as { term: number; votedFor: string | null };
    if (s.votedFor !== null) this.check.vote(address, s.term, s.votedFor);
  }

  private boot(address: string): void {
    const clock = new NodeClock(this.clock);
    const store = new StateStore(`/sim/${address}`, this.disks.get(address)!);
    const backend = new PeersBackend({
      seeds: this.addresses, store, client: this.net.client(address), clock, rng: this.rngs.get(address)!.fork(), log: QUIET,
      timing: this.o.timing, election: this.o.election,
    });
    const fence = new TermFence();
    const lease = () => {
      const v = backend.leader();
      return v.leader === null ? null : { term: v.term, leader: v.leader };
    };
    const local = this.actuator(address);
    const applier = new AssignmentApplier({ fence, lease, local });
    const p: NodeProc = { clock, backend, applier, fence, lease, local, seq: 0 };
    this.procs.set(address, p);
    this.net.attach(address, { clock, handle: (path, body) => this.handle(p, path, body) });
    backend.watch((e) => {
      if (e.kind !== "leader") return;
      if (e.view.self) {
        this.log.add(`leader ${address} term ${e.view.term}`);
        this.check.leader(e.view.term, address);
      }
    });
    void backend.start({ name: address, address, meta: {} });
    backend.campaign();
    this.log.add(`boot ${address} incarnation ${store.get().incarnation} term ${store.get().term}`);
    const tick = () => {
      if (!this.procs.has(address) || this.procs.get(address) !== p) return;
      this.lead(address, p);
      clock.setTimer(this.o.assignEveryMs, tick);
    };
    clock.setTimer(this.o.assignEveryMs, tick);
  }

  /** The leader's duty: one assignment with a unique action to every node. */
  private lead(address: string, p: NodeProc): void {
    const v = p.backend.leader();
    if (!v.self) return;
    const seq = p.seq++;
    const a: Assignment = { id: `${address}/${v.term}/${seq}`, term: v.term, leader: address, action: { kind: "wake", pool: "p", engine: `${address}#${v.term}#${seq}` } };
    const client = this.net.client(address);
    for (const to of this.addresses) {
      if (to === address) void this.apply(p, a);
      else client.post(to, "assign", a, 1000).catch(() => {});
    }
  }

  private apply(p: NodeProc, a: Assignment): unknown {
    const applier = this.o.bugs.noDedupe ? new AssignmentApplier({ fence: p.fence, lease: p.lease, local: p.local }) : p.applier;
    void applier.apply(a);
    return { ok: true };
  }

  private handle(p: NodeProc, path: string, body: unknown): unknown {
    const b = p.backend;
    switch (path) {
      case "gossip": {
        const from = (body as { from?: unknown })?.from;
        return b.onGossip(body as never, typeof from === "string" ? from.split(":")[0]! : null);
      }
      case "vote":
        return b.onVote(body as never);
      case "beat":
        return b.onBeat(body as never);
      case "assign":
        return this.apply(p, body as Assignment);
      default:
        return { error: "unknown path" };
    }
  }

  /** The node's actuator: records each action it is asked to take (the invariant: once each). */
  private actuator(address: string): Actuator {
    return {
      fleet: () => ({ engines: [], hosts: [] }) as never,
      act: async (action: Action) => {
        const engine = "engine" in action ? action.engine : "";
        const term = Number(engine.split("#")[1]);
        this.check.actuated(address, engine, term, engine.split("#")[0]!);
        return { ok: true, engine };
      },
      watch: () => () => {},
      predictReadyMs: () => null,
    };
  }
}
