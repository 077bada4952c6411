// Tokenizer worker thread (a Bun Worker; see pool.ts). Loads the same tokenizer as the main thread
// (src/tokenizer loadTokenizer(dir)) and encodes text pieces (without special tokens unless asked), so a 16k-token
// piece costs this thread 100+ ms instead of stalling the event loop. Ids go back as transferred
// Uint32Arrays (token ids are u32, the hasher's unit).
// A "chain" job also hashes: the pieces that follow the deepest memoised state are encoded (text)
// or taken as given (ids), and their blocks hashed on from that state (chain.ts hashStep), so a cold
// 32k-token prompt's 2,000 block hashes are not computed on the event loop either.
import { heapStats } from "bun:jsc";
import type { HerdError } from "../core/errors.ts";
import { measureThreadMemory } from "../core/thread-memory.ts";
import { loadTokenizer, type Tokenizer } from "../tokenizer/index.ts";
import { hashStep } from "./chain.ts";
import { packChain } from "./packed.ts";
import { prepareWhole, type WholeJob } from "./whole.ts";
import { Splitter, loadAddedTokens, specialAffixes, verifySplitter, type AddedToken } from "./segments.ts";

declare const self: Worker;

/** What the main thread needs to know about the tokenizer without loading it (see template.ts). */
export interface WorkerInfo {
  added: AddedToken[];
  /** Piece-wise encoding equals whole-text encoding (verifySplitter). */
  segment: boolean;
  affixes: { prefix: number[]; suffix: number[] } | null;
}

export interface ChainJob {
  last: bigint | null;
  tail: Uint32Array;
  blockSize: number;
  /** LoRA adapter name: seeds the block hashes (kv/hash.ts); absent = base model. */
  lora?: string;
  /** Text to encode (no special tokens), or ids already known. */
  items: (string | Uint32Array)[];
}

export interface ChainResult {
  ids: Uint32Array[];
  hashes: BigUint64Array[];
  tails: Uint32Array[];
  lasts: (bigint | null)[];
  /** Time the worker spent hashing (the rest of the job is encoding). */
  hashMs: number;
}

type Msg =
  | { op: "init"; dir: string }
  | { op: "encode"; id: number; texts: string[]; addSpecialTokens?: boolean }
  | ({ op: "chain"; id: number } & ChainJob)
  | ({ op: "whole"; id: number } & WholeJob)
  | { op: "decode"; id: number; tokens: number[] }
  // GET /admin/debug/memory (src/core/thread-memory.ts): this thread's own heap; ids are the asker's.
  | { op: "memory"; id: number; gc: boolean };

function chain(t: Tokenizer, job: ChainJob): ChainResult {
  const out: ChainResult = { ids: [], hashes: [], tails: [], lasts: [], hashMs: 0 };
  let last = job.last;
  let tail = job.tail;
  for (const item of job.items) {
    const ids = typeof item === "string" ? Uint32Array.from(t.encode(item, { addSpecialTokens: false })) : item;
    const t0 = performance.now();
    const step = hashStep(last, tail, ids, job.blockSize, job.lora);
    out.hashMs += performance.now() - t0;
    out.ids.push(ids);
    out.hashes.push(step.hashes);
    out.tails.push(step.tail);
    out.lasts.push(step.last);
    last = step.last;
    tail = step.tail;
  }
  return out;
}

let tok: Promise<Tokenizer> | null = null;
let splitter: Splitter | null = null;

self.onmessage = async (ev: MessageEvent<Msg>) => {
  const m = ev.data;
  if (m.op === "init") {
    tok = loadTokenizer(m.dir === "" ? null : m.dir);
    try {
      const t = await tok;
      const added = await loadAddedTokens(m.dir, t);
      splitter = new Splitter(added);
      const info: WorkerInfo = { added, segment: splitter.active && verifySplitter(t, splitter, added), affixes: specialAffixes(t) };
      self.postMessage({ op: "ready", info });
    } catch (e) {
      self.postMessage({ op: "failed", error: e instanceof Error ? e.message : String(e) });
    }
    return;
  }
  if (m.op === "memory") {
    // Answered at once, not behind the tokenizer's load: a thread still loading reports its heap too.
    self.postMessage({ op: "memory", id: m.id, mem: measureThreadMemory(m.gc, heapStats) });
    return;
  }
  try {
    if (tok === null) throw new Error("tokenizer worker used before init");
    const t = await tok;
    if (m.op === "chain") {
      const packed = packChain(chain(t, m));
      self.postMessage({ op: "done", id: m.id, ids: packed }, [packed.ids.buffer, packed.idEnds.buffer, packed.hashes.buffer, packed.hashEnds.buffer, packed.tails.buffer, packed.tailEnds.buffer, packed.lasts.buffer, packed.lastFlags.buffer] as ArrayBuffer[]);
      return;
    }
    if (m.op === "whole") {
      const r = prepareWhole(t, splitter!, m);
      self.postMessage({ op: "done", id: m.id, ids: r }, [r.hashes.buffer] as ArrayBuffer[]);
      return;
    }
    if (m.op === "decode") {
      // /detokenize answered by herd (src/frontend/tokens.ts): the text rides in `ids`.
      self.postMessage({ op: "done", id: m.id, ids: t.decode(m.tokens) });
      return;
    }
    const out = m.texts.map((s) => Uint32Array.from(t.encode(s, { addSpecialTokens: m.addSpecialTokens === true })));
    self.postMessage({ op: "done", id: m.id, ids: out }, out.map((a) => a.buffer));
  } catch (e) {
    // A HerdError (bad prompt, template failure) keeps its status and code across the thread.
    const herd = e instanceof Error && e.name === "HerdError" ? (e as HerdError) : null;
    const fields = herd ? { status: herd.status, type: herd.type, code: herd.code, param: herd.param } : undefined;
    self.postMessage({ op: "error", id: m.id, error: e instanceof Error ? e.message : String(e), herd: fields });
  }
};
