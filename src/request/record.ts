// Decision records: one JSON object per finished request, built when its ticket is released
// (ticket.ts metricsRecorder): when it arrived, the model, prompt length and cached tokens, the
// worker chosen and the chosen candidate's cost terms, the outcome and its TTFT/ITL/E2E. The
// status page reads the last ones (RecentRequests, /admin/requests); `decision_log` writes them to
// a rotating file (record-file.ts) that `herd simulate --trace` replays against other policies.
//
// The line is a superset of the Mooncake trace layout (timestamp, input_length, output_length,
// hash_ids, session_id; FAST'25 Mooncake traces, as NVIDIA Dynamo's
// benchmarks/data_generator/README.md describes them), so its prefix sharing survives replay without
// storing any prompt text: hash_ids are the KV chain hashes at each 512-token boundary (present
// when the policy hashed the prompt: kv, prefix), two prompts share an id exactly when they share
// that whole prefix.
import type { AdminRoute } from "../http/admin-route.ts";
import type { Decision, RouteRequest } from "../router/index.ts";
import { outcomeStatus, type Outcome, type Ticket } from "./ticket.ts";

/** Tokens per hash id, as in the Mooncake layout. */
export const RECORD_BLOCK_TOKENS = 512;

export interface DecisionRecord {
  /** Arrival, wall-clock ms since the epoch. */
  timestamp: number;
  model: string | null;
  /** Prompt tokens as herd counted them (exact when the router tokenized, else characters / 4). */
  input_length: number;
  /** Output tokens (usage.completion_tokens, else stream events counted); 0 when unknown. */
  output_length: number;
  max_tokens: number | null;
  hash_ids: number[];
  session_id: string | null;
  worker: string | null;
  policy: string | null;
  /** The chosen candidate's terms as the policy saw them (load, overlap, cost…). */
  terms: Record<string, number | string | null> | null;
  reason: string | null;
  /** Candidates the policy compared. */
  candidates: number;
  cached_tokens: number | null;
  predicted_cached_tokens: number | null;
  outcome: Outcome["kind"];
  status: number;
  /** Why it failed (upstream error kind, refusal reason, client phase), null when complete. */
  error: string | null;
  ttft_ms: number | null;
  /** Mean inter-token latency: (E2E − TTFT) / (output tokens − 1), null below two tokens. */
  itl_ms: number | null;
  e2e_ms: number;
}

export type RecordSink = (r: DecisionRecord) => void;

const round = (x: number) => Math.round(x * 1000) / 1000;

/** 53-bit ids of the chain hashes at each full 512-token boundary of the prompt. */
export function hashIds(route: Pick<RouteRequest, "blockHashes" | "blockSize"> | null): number[] {
  const hashes = route?.blockHashes;
  if (!hashes || hashes.length === 0) return [];
  const per = Math.max(1, Math.floor(RECORD_BLOCK_TOKENS / (route.blockSize ?? 16)));
  const out: number[] = [];
  for (let i = per - 1; i < hashes.length; i += per) out.push(Number(BigInt.asUintN(53, hashes[i]!)));
  return out;
}

function errorOf(o: Outcome): string | null {
  switch (o.kind) {
    case "complete":
      return null;
    case "refused":
      return o.reason;
    case "upstream_failed":
    case "broken":
      return o.reason;
    case "client_closed":
      return o.phase;
    case "client_stalled":
      return "client_stalled";
  }
}

/** The record of a released ticket; `nowMs` is the clock at release, `wallMs` the wall clock then. */
export function decisionRecord(t: Ticket, o: Outcome, nowMs: number, wallMs: number, decision: Decision | null = t.decision): DecisionRecord {
  const route = t.leg?.route ?? null;
  const chosen = decision?.candidates.find((c) => c.worker === decision.chosen) ?? null;
  const e2e = nowMs - t.arrivedAtMs;
  const ttft = t.firstTokenAtMs === null ? null : t.firstTokenAtMs - t.arrivedAtMs;
  const out = o.kind === "complete" ? (o.outputTokens ?? null) : null;
  return {
    timestamp: Math.round(wallMs - e2e),
    model: t.model,
    input_length: route?.promptTokens ?? 0,
    output_length: out ?? 0,
    max_tokens: t.leg?.maxTokens ?? null,
    hash_ids: hashIds(route),
    session_id: route?.sessionId ?? null,
    worker: t.workerId,
    policy: decision?.policy ?? (t.workerId !== null ? "pinned" : null),
    terms: chosen ? { ...chosen.terms } : null,
    reason: decision?.reason ?? null,
    candidates: decision?.candidates.length ?? 0,
    cached_tokens: o.kind === "complete" ? o.cachedTokens : null,
    predicted_cached_tokens: t.predictedCachedTokens,
    outcome: o.kind,
    status: outcomeStatus(o),
    error: errorOf(o),
    ttft_ms: ttft === null ? null : round(ttft),
    itl_ms: ttft !== null && out !== null && out >= 2 ? round((e2e - ttft) / (out - 1)) : null,
    e2e_ms: round(e2e),
  };
}

/** The last records in memory (bounded), each with a sequence number a poller resumes from. */
export class RecentRequests {
  private readonly ring: (DecisionRecord | undefined)[];
  private next = 0;

  constructor(readonly capacity = 2048) {
    this.ring = new Array<DecisionRecord | undefined>(capacity);
  }

  readonly sink: RecordSink = (r) => {
    this.ring[this.next % this.capacity] = r;
    this.next++;
  };

  /** Sequence number the next record will get. */
  get seq(): number {
    return this.next;
  }

  /** Records with sequence number ≥ since (at most `limit`, the newest), oldest first. */
  since(since: number, limit = this.capacity): { seq: number; records: DecisionRecord[] } {
    const from = Math.max(since, this.next - this.capacity, this.next - limit, 0);
    const records: DecisionRecord[] = [];
    for (let i = from; i < this.next; i++) records.push(this.ring[i % this.capacity]!);
    return { seq: this.next, records };
  }
}

/** GET /admin/requests?since=SEQ&limit=N: the last records (the status page polls it with the seq it got). */
export function recentRequestsRoute(recent: RecentRequests, wallMs: () => number): AdminRoute {
  return {
    method: "GET",
    path: "/requests",
    handle(req) {
      const q = new URL(req.url).searchParams;
      const int = (v: string | null, d: number) => (v !== null && /^\d{1,15}$/.test(v) ? Number(v) : d);
      const { seq, records } = recent.since(int(q.get("since"), 0), Math.min(int(q.get("limit"), recent.capacity), recent.capacity));
      return Response.json({ seq, now_ms: wallMs(), records });
    },
  };
}
