// What a node publishes about its workers, and the consistency check before pooling them.
// Pure functions over src/workers types: the daemon calls advertise() when its registry changes,
// puts encodeAdvert() into its member metadata (backend.setMeta), and on every membership event runs
// poolWorkers() over the members' adverts to get the remote workers its registry should hold.
// Why refuse mismatches: two engines of one model with different block sizes, tokenizers or hash
// seeds produce different block hashes for the same prompt, so KV-aware routing would silently miss
// every cache hit across them (Dynamo refuses mismatched model deployment cards for this reason).
import { ENGINE_KINDS, type EngineKind, type Role } from "../config/types.ts";
import type { Worker, WorkerState } from "../workers/worker.ts";
import { WORKER_STATES } from "../workers/worker.ts";
import type { Member, NodeMeta } from "./backend.ts";

/** The facts that must agree for a model's workers to share one KV index. */
export interface ModelCard {
  model: string;
  block_size: number;
  /** SHA-256 of the tokenizer files (empty string = built-in tokenizer). */
  tokenizer_checksum: string;
  /** PYTHONHASHSEED / block-hash seed the engines use. */
  hash_seed: number;
}

export interface PublishedWorker {
  id: string;
  model: string;
  role: Role;
  /** Engine kind (sim, vllm, …) as the owner runs it; "external" when a peer omits it. */
  kind: EngineKind;
  state: WorkerState;
  /** Load summary: herd's in-flight count and the last scraped engine figures. */
  load: { in_flight: number; running: number | null; waiting: number | null; kv_usage: number | null };
  /** KV cache capacity in blocks, when the engine reports it. */
  kv_capacity_blocks: number | null;
}

export interface NodeAdvert {
  node: string;
  models: ModelCard[];
  workers: PublishedWorker[];
}

/** Bounds on what a peer may publish (an advert rides in every heartbeat). */
export const ADVERT_WORKERS_MAX = 256;
export const ADVERT_MODELS_MAX = 64;

export const CARD_FIELDS = ["block_size", "tokenizer_checksum", "hash_seed"] as const;

export function advertise(node: string, workers: readonly Worker[], cards: readonly ModelCard[], kvCapacity: ReadonlyMap<string, number> = new Map()): NodeAdvert {
  return {
    node,
    models: cards.slice(0, ADVERT_MODELS_MAX).map((c) => ({ ...c })),
    workers: workers
      .filter((w) => w.node === node) // only our own: remote workers are published by their owners
      .slice(0, ADVERT_WORKERS_MAX)
      .map((w) => ({
        id: w.id,
        model: w.model,
        role: w.role,
        kind: w.kind,
        state: w.state,
        load: { in_flight: w.load.in_flight, running: w.load.running, waiting: w.load.waiting, kv_usage: w.load.kv_usage },
        kv_capacity_blocks: kvCapacity.get(w.id) ?? null,
      })),
  };
}

export const ADVERT_META_KEY = "advert";

export function encodeAdvert(a: NodeAdvert): NodeMeta {
  return { [ADVERT_META_KEY]: JSON.stringify(a) };
}

const isNum = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v);
const numOrNull = (v: unknown) => (isNum(v) ? v : null);

/** Parse a member's advert; null when absent or malformed (a bad peer cannot inject odd shapes). */
export function decodeAdvert(m: Pick<Member, "name" | "meta">): NodeAdvert | null {
  const raw = m.meta[ADVERT_META_KEY];
  if (typeof raw !== "string") return null;
  let j: any;
  try {
    j = JSON.parse(raw);
  } catch {
    return null;
  }
  if (!j || !Array.isArray(j.models) || !Array.isArray(j.workers)) return null;
  const models: ModelCard[] = j.models
    .slice(0, ADVERT_MODELS_MAX)
    .filter((c: any) => typeof c?.model === "string" && isNum(c.block_size) && typeof c.tokenizer_checksum === "string" && isNum(c.hash_seed))
    .map((c: any) => ({ model: c.model, block_size: c.block_size, tokenizer_checksum: c.tokenizer_checksum, hash_seed: c.hash_seed }));
  const workers: PublishedWorker[] = j.workers
    .slice(0, ADVERT_WORKERS_MAX)
    .filter((w: any) => typeof w?.id === "string" && typeof w.model === "string" && typeof w.role === "string" && (WORKER_STATES as readonly string[]).includes(w.state))
    .map((w: any) => ({
      id: w.id,
      model: w.model,
      role: w.role as Role,
      kind: (ENGINE_KINDS as readonly string[]).includes(w.kind) ? (w.kind as EngineKind) : "external",
      state: w.state as WorkerState,
      load: { in_flight: isNum(w.load?.in_flight) ? w.load.in_flight : 0, running: numOrNull(w.load?.running), waiting: numOrNull(w.load?.waiting), kv_usage: numOrNull(w.load?.kv_usage) },
      kv_capacity_blocks: numOrNull(w.kv_capacity_blocks),
    }));
  return { node: m.name, models, workers }; // the member name, not the advert's claim, names the node
}

export interface CardMismatch {
  node: string;
  model: string;
  field: (typeof CARD_FIELDS)[number];
  value: string | number;
  expected: string | number;
  /** The node whose card is the reference (this node when it serves the model). */
  reference: string;
  message: string;
}

/**
 * Split remote adverts into pooled workers and refusals. The reference card of a model is this
 * node's own when it serves the model, else the card of the first node (by name) publishing it, so
 * every node reaches the same verdict from the same membership. A node whose card differs has its
 * workers of that model refused; the error names the node and the field.
 */
export function poolWorkers(local: NodeAdvert, remotes: readonly NodeAdvert[]): { workers: Worker[]; refused: CardMismatch[] } {
  const ref = new Map<string, { card: ModelCard; node: string }>();
  for (const c of local.models) ref.set(c.model, { card: c, node: local.node });
  const sorted = [...remotes].filter((r) => r.node !== local.node).sort((a, b) => (a.node < b.node ? -1 : a.node > b.node ? 1 : 0));
  for (const r of sorted) for (const c of r.models) if (!ref.has(c.model)) ref.set(c.model, { card: c, node: r.node });
  const refused: CardMismatch[] = [];
  const workers: Worker[] = [];
  for (const r of sorted) {
    const bad = new Set<string>();
    for (const c of r.models) {
      const want = ref.get(c.model)!;
      for (const f of CARD_FIELDS) {
        if (c[f] === want.card[f]) continue;
        bad.add(c.model);
        refused.push({
          node: r.node,
          model: c.model,
          field: f,
          value: c[f],
          expected: want.card[f],
          reference: want.node,
          message: `node ${r.node}: model ${c.model} has ${f} ${JSON.stringify(c[f])} but ${want.node} has ${JSON.stringify(want.card[f])}; its ${c.model} workers are not pooled`,
        });
      }
    }
    const carded = new Set(r.models.map((c) => c.model));
    for (const w of r.workers) {
      if (bad.has(w.model) || !carded.has(w.model)) continue; // no card: nothing proves it is compatible
      workers.push({
        id: w.id,
        node: r.node,
        model: w.model,
        role: w.role,
        kind: w.kind,
        url: "", // reached through the owner node's peer API, never the engine directly
        state: w.state,
        load: { ...w.load, scraped_at_ms: null },
        restarts: 0,
      });
    }
  }
  return { workers, refused };
}
