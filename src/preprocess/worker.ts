// Tokenizer worker thread (a Bun Worker; see pool.ts). Loads the same tokenizer as the main thread
// (src/tokenizer loadTokenizer(dir)) and encodes text pieces (without special tokens unless asked), so a 16k-token
// piece costs this thread 100+ ms instead of stalling the event loop. Ids go back as transferred
// Uint32Arrays (token ids are u32, the hasher's unit).
import { loadTokenizer, type Tokenizer } from "../tokenizer/index.ts";

declare const self: Worker;

type Msg = { op: "init"; dir: string } | { op: "encode"; id: number; texts: string[]; addSpecialTokens?: boolean };

let tok: Promise<Tokenizer> | null = null;

self.onmessage = async (ev: MessageEvent<Msg>) => {
  const m = ev.data;
  if (m.op === "init") {
    tok = loadTokenizer(m.dir === "" ? null : m.dir);
    try {
      await tok;
      self.postMessage({ op: "ready" });
    } catch (e) {
      self.postMessage({ op: "failed", error: e instanceof Error ? e.message : String(e) });
    }
    return;
  }
  try {
    if (tok === null) throw new Error("tokenizer worker used before init");
    const t = await tok;
    const out = m.texts.map((s) => Uint32Array.from(t.encode(s, { addSpecialTokens: m.addSpecialTokens === true })));
    self.postMessage({ op: "done", id: m.id, ids: out }, out.map((a) => a.buffer));
  } catch (e) {
    self.postMessage({ op: "error", id: m.id, error: e instanceof Error ? e.message : String(e) });
  }
};
