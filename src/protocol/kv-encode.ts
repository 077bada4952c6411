// Encode KV event batches the way vLLM does (docs/references.md#engines-1.5, #engines-1.6), for the simulated engine and
// for tests: "array" = positional events (vLLM ≤ 0.23; omit_defaults drops only trailing fields
// equal to their default), "map" = events as maps with a "type" key (vLLM ≥ 0.24; defaulted
// fields equal to None are absent). The envelope is always the positional [ts, events, rank].
import { Encoder } from "@msgpack/msgpack";
import type { KvEvent } from "./kv-events.ts";

export type KvEventFormat = "array" | "map";

const encoder = new Encoder({ useBigInt64: true, ignoreUndefined: true });

function storedArray(e: Extract<KvEvent, { type: "BlockStored" }>): unknown[] {
  const a: unknown[] = [
    "BlockStored", e.blockHashes, e.parentBlockHash, e.tokenIds, e.blockSize, e.loraId, e.medium, e.loraName,
    e.extraKeys ?? null, e.groupIdx, e.kvCacheSpecKind, e.slidingWindow,
  ];
  while (a.length > 8 && a[a.length - 1] === null) a.pop();
  return a;
}

function storedMap(e: Extract<KvEvent, { type: "BlockStored" }>): Record<string, unknown> {
  const m: Record<string, unknown> = {
    type: "BlockStored",
    block_hashes: e.blockHashes,
    parent_block_hash: e.parentBlockHash,
    token_ids: e.tokenIds,
    block_size: e.blockSize,
    lora_id: e.loraId,
    medium: e.medium,
    lora_name: e.loraName,
  };
  if (e.extraKeys !== undefined) m.extra_keys = e.extraKeys;
  if (e.groupIdx !== null) m.group_idx = e.groupIdx;
  if (e.kvCacheSpecKind !== null) m.kv_cache_spec_kind = e.kvCacheSpecKind;
  if (e.slidingWindow !== null) m.kv_cache_spec_sliding_window = e.slidingWindow;
  if (e.locality !== null) m.locality = e.locality;
  return m;
}

function eventValue(e: KvEvent, format: KvEventFormat): unknown {
  switch (e.type) {
    case "BlockStored":
      return format === "array" ? storedArray(e) : storedMap(e);
    case "BlockRemoved":
      if (format === "array") {
        const a: unknown[] = ["BlockRemoved", e.blockHashes, e.medium, e.groupIdx];
        if (a[3] === null) a.pop();
        return a;
      }
      return {
        type: "BlockRemoved",
        block_hashes: e.blockHashes,
        medium: e.medium,
        ...(e.groupIdx !== null ? { group_idx: e.groupIdx } : {}),
        ...(e.locality !== null ? { locality: e.locality } : {}),
      };
    case "AllBlocksCleared":
      return format === "array" ? ["AllBlocksCleared"] : { type: "AllBlocksCleared" };
  }
}

/** A BlockStored with defaults for the fields most producers leave empty. */
export function blockStored(
  f: Pick<Extract<KvEvent, { type: "BlockStored" }>, "blockHashes" | "parentBlockHash" | "tokenIds" | "blockSize"> &
    Partial<Extract<KvEvent, { type: "BlockStored" }>>,
): Extract<KvEvent, { type: "BlockStored" }> {
  return {
    loraId: null, medium: "GPU", loraName: null, cacheSalt: null, groupIdx: null, kvCacheSpecKind: null,
    slidingWindow: null, locality: null, ...f, type: "BlockStored",
  };
}

export function blockRemoved(blockHashes: bigint[], medium: string | null = "GPU"): KvEvent {
  return { type: "BlockRemoved", blockHashes, medium, groupIdx: null, locality: null };
}

export function encodeKvEventBatch(
  batch: { ts: number; events: readonly KvEvent[]; dpRank?: number | null },
  format: KvEventFormat = "map",
): Uint8Array {
  // The envelope is written by hand so ts is always float64 (0xcb) like msgspec's, even when integral.
  const events = encoder.encode(batch.events.map((e) => eventValue(e, format)));
  const rank = encoder.encode(batch.dpRank ?? 0);
  const out = new Uint8Array(1 + 9 + events.length + rank.length);
  out[0] = 0x93;
  out[1] = 0xcb;
  new DataView(out.buffer).setFloat64(2, batch.ts, false);
  out.set(events, 10);
  out.set(rank, 10 + events.length);
  return out;
}
