// prefixaware: vLLM production-stack's PrefixAwareRouter, emulated. Facts from
// vllm-project/production-stack @a6c01db0 (2026-08-05): src/vllm_router/routers/routing_logic.py
// (PrefixAwareRouter, last changed in 4d750c9a) and src/vllm_router/prefix/hashtrie.py (HashTrie):
//   - the prompt (chat: message contents joined by "\n") is cut into 128-character chunks, each
//     xxh64-hashed on its own; the trie's depth gives a chunk its context. Each node holds the set of
//     endpoints a prompt through it was sent to.
//   - match: from the root, follow the prompt's chunks; at each node intersect the endpoint set with
//     the still-selected ones (initially every available endpoint); stop at a missing node or an
//     empty intersection. The survivors share the longest routed prefix; none matched = all.
//   - pick: random.choice among the survivors. No load, no queue, no engine events: it learns only
//     from its own decisions — every routed prompt is inserted under the chosen endpoint.
//   - below --prefix-min-match-length (default 0, so never by default) it falls back to the lowest
//     QPS endpoint; not emulated (the default never takes it).
//   - no eviction ("we assume that there is no eviction of prefix cache"); its memory grows without
//     bound (production-stack issue #687).
//   - a consequence: prompts behind one shared system prompt all go to the first endpoint that
//     served it (after the system prompt's chunks only that endpoint survives the intersection, and
//     a new document's first chunk ends the walk there) — one engine takes the whole doc-qa load
//     (docs/benchmarks.md "Emulated anchors").
// Here: chunks of PRODUCTION_STACK_CHUNK_BLOCKS token blocks (2 × 16 tokens ≈ 128 characters at the
// 4 characters per token llm-d also assumes), keyed by the sequence hash of the chunk's last block,
// which names the whole prefix as the trie path does; a trailing partial chunk is a node too, as in
// hashtrie.py. Unlike production-stack the trie is bounded: at most router.prefix.max_blocks_per_worker
// nodes, least recently routed forgotten first (each insert refreshes a path deepest first, so a
// child is forgotten before its parent). The source reports each worker's leading chunks as GPU
// overlap in blocks; the `overlap` scorer (−blocks) and the `min` picker (exact ties uniformly at
// random) then pick uniformly among the workers with the longest match — production-stack's choice.
import type { Overlap } from "../../kv/indexer.ts";
import type { CacheSource } from "../pipeline/types.ts";
import { preset } from "./preset.ts";

/** 128 characters ≈ 32 tokens = 2 blocks of 16 (hashtrie.py chunk_size 128). */
export const PRODUCTION_STACK_CHUNK_BLOCKS = 2;

/** Indices into the prompt's block hashes of each chunk's last block (the trailing partial chunk too). */
export function chunkEnds(blocks: number, chunkBlocks = PRODUCTION_STACK_CHUNK_BLOCKS): number[] {
  const out: number[] = [];
  for (let end = chunkBlocks - 1; end < blocks; end += chunkBlocks) out.push(end);
  if (blocks > 0 && blocks % chunkBlocks !== 0) out.push(blocks - 1);
  return out;
}

/** The trie of routed prompts: chunk key (sequence hash) → workers it was sent to, in recency order. */
export class PrefixTrie {
  private readonly nodes = new Map<bigint, Set<string>>();

  constructor(
    readonly maxNodes: number,
    readonly chunkBlocks = PRODUCTION_STACK_CHUNK_BLOCKS,
  ) {}

  get size(): number {
    return this.nodes.size;
  }

  /** Per worker, the prompt blocks covered by its longest run of routed chunks from the root. */
  match(hashes: readonly bigint[]): Map<string, number> {
    const depth = new Map<string, number>();
    const ends = chunkEnds(hashes.length, this.chunkBlocks);
    for (let i = 0; i < ends.length; i++) {
      const node = this.nodes.get(hashes[ends[i]!]!);
      if (!node) break;
      let any = false;
      for (const w of node) {
        if ((depth.get(w) ?? 0) === i) {
          depth.set(w, i + 1);
          any = true;
        }
      }
      if (!any) break; // nobody still on the path: the intersection is empty
    }
    const blocks = new Map<string, number>();
    for (const [w, d] of depth) blocks.set(w, ends[d - 1]! + 1);
    return blocks;
  }

  /** Insert a routed prompt under `worker` (hashtrie.py insert), deepest chunk first. */
  insert(worker: string, hashes: readonly bigint[]): void {
    const ends = chunkEnds(hashes.length, this.chunkBlocks);
    for (let i = ends.length - 1; i >= 0; i--) {
      const key = hashes[ends[i]!]!;
      const node = this.nodes.get(key) ?? new Set<string>();
      this.nodes.delete(key);
      node.add(worker);
      this.nodes.set(key, node);
    }
    while (this.nodes.size > this.maxNodes) this.nodes.delete(this.nodes.keys().next().value!);
  }

  forget(worker: string): void {
    for (const [k, s] of this.nodes) {
      s.delete(worker);
      if (s.size === 0) this.nodes.delete(k);
    }
  }
}

export function trieSource(trie: PrefixTrie): CacheSource {
  return {
    type: "prefix-trie",
    needs: { blockHashes: true },
    match(hashes) {
      const overlap = new Map<string, Overlap>();
      for (const [w, n] of trie.match(hashes)) overlap.set(w, { gpu: n, cpu: 0, disk: 0 });
      return { overlap, predicted: new Map() };
    },
    commit: (chosen, f) => trie.insert(chosen.id, f.hashes),
    forget: (worker) => trie.forget(worker),
  };
}

export const prefixaware = preset({
  name: "prefixaware",
  spec: () => ({ filters: [], scorers: [{ type: "overlap", weight: 1 }], picker: "min" }),
  source: (cfg) => trieSource(new PrefixTrie(cfg.prefix.max_blocks_per_worker)),
});
