// herd's P/D metrics (issue 13): the orchestrator's PdObserver on a prom-client Registry (the
// daemon passes herd's). Decode inter-token latency is the relay's (request lifecycle), measured
// on the client leg like any stream.
import { Counter, Histogram, type Registry } from "prom-client";
import type { DisaggDecision } from "./decider.ts";
import type { FallbackReason, PdObserver } from "./orchestrator.ts";

const SECONDS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

export class PdMetrics implements PdObserver {
  private readonly decisions: Counter<"reason">;
  private readonly fallbacks: Counter<"reason">;
  private readonly prefillS: Histogram;
  private readonly transferS: Histogram;
  private readonly pairs: Counter<"prefill_node" | "decode_node">;
  private readonly abandoned: Counter<"worker">;

  constructor(registry: Registry) {
    const registers = [registry];
    this.decisions = new Counter({ name: "herd_pd_decisions_total", help: "Conditional disaggregation decisions by reason (disaggregated, short_uncached_prompt, prefill_saturated, no_prefill_worker).", labelNames: ["reason"], registers });
    this.fallbacks = new Counter({ name: "herd_pd_fallbacks_total", help: "P/D fallbacks by reason (prefill_retry, prefill_failed_local, no_transfer_params, decode_retry, decode_redo_prefill, local_retry).", labelNames: ["reason"], registers });
    this.prefillS = new Histogram({ name: "herd_pd_prefill_seconds", help: "Time of a prefill leg, sent to answered.", buckets: SECONDS, registers });
    this.transferS = new Histogram({ name: "herd_pd_transfer_to_first_token_seconds", help: "From the prefill answer to the decode leg's commit (KV transfer + first decode token).", buckets: SECONDS, registers });
    this.pairs = new Counter({ name: "herd_pd_pairs_total", help: "Committed P/D pairs by prefill and decode node.", labelNames: ["prefill_node", "decode_node"], registers });
    this.abandoned = new Counter({ name: "herd_pd_abandoned_prefills_total", help: "Prefills whose held KV blocks no committed decode used: the engine holds them until its lease ends (vLLM kv_lease_duration, 30 s). Upper bound.", labelNames: ["worker"], registers });
    for (const reason of ["disaggregated", "short_uncached_prompt", "prefill_saturated", "no_prefill_worker"]) this.decisions.inc({ reason }, 0);
  }

  decision(d: DisaggDecision): void {
    this.decisions.inc({ reason: d.reason });
  }
  fallback(reason: FallbackReason): void {
    this.fallbacks.inc({ reason });
  }
  prefillDone(ms: number): void {
    this.prefillS.observe(ms / 1000);
  }
  transferToFirstToken(ms: number): void {
    this.transferS.observe(ms / 1000);
  }
  pair(prefillNode: string, decodeNode: string): void {
    this.pairs.inc({ prefill_node: prefillNode, decode_node: decodeNode });
  }
  abandonedPrefill(worker: string): void {
    this.abandoned.inc({ worker });
  }
}
