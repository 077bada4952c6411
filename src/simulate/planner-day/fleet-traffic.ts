// The planner day's offered load (fleet-sim.ts): the rate shape's arrivals enter the live nodes
// round-robin, wait in the node's planner gate (held while no engine is ready), then go through
// herd's real Router to an engine's scheduler as a unique prompt of `isl` tokens run to `osl`
// (ignore_eos). The scorecard sees every request begin, its first token, its end or its drop.
import type { VirtualClock } from "../../core/clock.ts";
import type { Rng } from "../../core/rng.ts";
import type { FinishInfo, SubmitRequest } from "../../engine/sim/scheduler.ts";
import type { Router } from "../../router/index.ts";
import { shapedArrivals, type RateShape } from "../../workload/rate-shapes.ts";
import type { SimNode } from "./fleet-types.ts";
import type { Scorecard } from "./score.ts";

/** Every output token of the day's requests (ignore_eos: they run to max_tokens, as a trace's osl says). */
const NEXT_TOKEN = { id: 7, eos: false };
const NEVER = new AbortController().signal;

export interface TrafficDeps {
  clock: VirtualClock;
  router: Router;
  score: Scorecard;
  model: string;
  /** The fleet's nodes now (a restarted host's node replaces its entry). */
  nodes: () => readonly SimNode[];
  /** Bring the in-flight accounting up to now; called before an in-flight count changes. */
  accrue: () => void;
}

export class FleetTraffic {
  private rr = 0;
  private reqSeq = 0;

  constructor(private readonly d: TrafficDeps) {}

  /** Set a timer for each arrival of `shape` over `durationS`, times and lengths drawn from `rng`. */
  schedule(shape: RateShape, durationS: number, rng: Rng): void {
    const { clock } = this.d;
    const it = shapedArrivals(shape, durationS, rng);
    const next = () => {
      const n = it.next();
      if (n.done) return;
      clock.setTimer(n.value.atS * 1000 - clock.now(), () => {
        this.arrive(n.value.isl, n.value.osl);
        next();
      });
    };
    next();
  }

  private arrive(isl: number, osl: number): void {
    const { clock, score, model } = this.d;
    const front = this.d.nodes().filter((n) => n.up && !n.stalled);
    if (front.length === 0) return score.drop();
    const node = front[this.rr++ % front.length]!;
    const arrivedMs = clock.now();
    node.gate.arrived(model, isl, osl);
    node.gate.pass(model, { bytes: isl * 4, promptTokens: isl, signal: NEVER }).then(
      () => {
        if (arrivedMs !== clock.now()) score.heldWait((clock.now() - arrivedMs) / 1000);
        if (!this.dispatch(isl, osl, arrivedMs, node)) score.drop();
      },
      () => score.drop(),
    );
  }

  /** Route and submit one request; false when no engine can take it. */
  private dispatch(isl: number, osl: number, arrivedMs: number, front?: SimNode): boolean {
    const { clock, score, model } = this.d;
    let routed;
    try {
      routed = this.d.router.routeAndBook({ model, sessionId: null, promptTokens: isl, exclude: new Set() });
    } catch {
      return false;
    }
    const id = routed.worker.id;
    const e = this.d.nodes().find((n) => n.up && n.sup.engines.has(id))?.sup.engines.get(id);
    const sched = e?.sched;
    if (!e || !sched) {
      routed.lease.release();
      return false;
    }
    const rec = score.begin(arrivedMs, clock.now());
    const lease = routed.lease;
    // A unique prompt of isl tokens (no prefix is shared in a rate-shape trace): its first tokens number the request.
    const seq = this.reqSeq++;
    const prompt = new Uint32Array(isl);
    prompt[0] = seq % 2 ** 32;
    prompt[1] = Math.floor(seq / 2 ** 32) + 1;
    const sub: SubmitRequest = {
      id: `q${seq}`, promptTokens: prompt, maxTokens: osl, ignoreEos: true, nextToken: () => NEXT_TOKEN,
      handlers: {
        onToken: (_id, index, nowMs) => {
          if (index !== 0) return;
          lease.firstToken();
          rec.firstTokenMs = nowMs;
        },
        onFinish: (f: FinishInfo) => {
          lease.release();
          if (f.reason === "abort") return; // the host died under it: already counted as dropped
          this.d.accrue();
          e.inFlight--;
          score.finish(rec, f.finishMs, osl);
          // The entry node measures it, as a live frontend does (SLA mode's correction reads it).
          const first = rec.firstTokenMs ?? f.finishMs;
          if (front?.up) front.planner.recordLatency(model, first - arrivedMs, osl > 1 ? (f.finishMs - first) / (osl - 1) : null);
        },
      },
    };
    try {
      sched.submit(sub);
    } catch {
      lease.release(); // refused (too long for the engine, its queue full): a drop
      return false;
    }
    this.d.accrue();
    e.inFlight++;
    return true;
  }
}
