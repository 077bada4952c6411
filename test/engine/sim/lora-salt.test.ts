// LoRA and cache_salt are vLLM block-hash extra keys (vllm/v1/core/kv_cache_utils.py
// generate_block_hash_extra_keys): the sim engine keeps their caches apart like vLLM, publishes
// them in BlockStored (lora_name, extra_keys), and herd's index, fed those events over the real
// wire encoding, holds exactly the hashes the router computes for the same request.
import { describe, expect, test } from "bun:test";
import { BlockIndex } from "../../../src/kv/block-index.ts";
import { blockHashes } from "../../../src/kv/hash.ts";
import { WorkerBlockMap } from "../../../src/kv/worker-blocks.ts";
import { decodeKvEventBatch } from "../../../src/protocol/kv-events.ts";
import { encodeKvEventBatch } from "../../../src/protocol/kv-encode.ts";
import type { KvEvent } from "../../../src/engine/sim/blocks.ts";
import { toWireEvents } from "../../../src/engine/sim/kv-publisher.ts";
import { startSimEngine } from "../../../src/engine/sim/server.ts";
import { createPreprocessor } from "../../../src/preprocess/index.ts";

const BS = 16;

async function withEngine(fn: (url: string, batches: KvEvent[][]) => Promise<void>): Promise<void> {
  const batches: KvEvent[][] = [];
  const e = await startSimEngine({ port: 0, zeroDelay: true, model: "base", loraModules: [{ name: "sql-lora", path: "/adapters/sql" }], onKvEvents: (b) => batches.push(b) });
  try {
    await fn(e.url, batches);
  } finally {
    await e.stop();
  }
}

const complete = (url: string, body: Record<string, unknown>) =>
  fetch(`${url}/v1/completions`, { method: "POST", body: JSON.stringify({ max_tokens: 1, ...body }) }).then(async (r) => ({ status: r.status, body: (await r.json()) as any }));

/** Feed engine batches through the wire encoding (both layouts) into herd's index. */
function index(batches: KvEvent[][], format: "map" | "array"): BlockIndex {
  const ix = new BlockIndex();
  const m = new WorkerBlockMap("w", ix);
  for (const b of batches) {
    const decoded = decodeKvEventBatch(encodeKvEventBatch({ ts: 1, events: toWireEvents(b) }, format));
    for (const ev of decoded.events) m.apply(ev);
  }
  return ix;
}

describe("LoRA and cache_salt", () => {
  const prompt = Array.from({ length: 70 }, (_, i) => 2000 + i); // 4 full blocks

  test("router hashes: the same prompt with or without LoRA / salt gives different hashes in every block", () => {
    const base = blockHashes(prompt, BS);
    const variants = [
      blockHashes(prompt, BS, { lora: "sql-lora" }),
      blockHashes(prompt, BS, { cacheSalt: "tenant-a" }),
      blockHashes(prompt, BS, { cacheSalt: "tenant-b" }),
      blockHashes(prompt, BS, { lora: "sql-lora", cacheSalt: "tenant-a" }),
    ];
    const all = [base, ...variants];
    for (let i = 0; i < all.length; i++) {
      expect(all[i]).toHaveLength(4);
      for (let j = i + 1; j < all.length; j++) for (let k = 0; k < 4; k++) expect(all[i]![k]).not.toBe(all[j]![k]);
    }
    // Empty values are "none", as in vLLM (an empty salt is refused there; no adapter = base).
    expect(blockHashes(prompt, BS, { lora: "", cacheSalt: "" })).toEqual(base);
    expect(blockHashes(prompt, BS, "sql-lora")).toEqual(variants[0]!);
  });

  test("sim engine: a salted or LoRA request gets no cache hit from the base model's blocks", async () => {
    await withEngine(async (url) => {
      expect((await complete(url, { prompt })).body.usage.prompt_tokens_details.cached_tokens).toBe(0);
      expect((await complete(url, { prompt })).body.usage.prompt_tokens_details.cached_tokens).toBe(64);
      expect((await complete(url, { prompt, cache_salt: "tenant-a" })).body.usage.prompt_tokens_details.cached_tokens).toBe(0);
      expect((await complete(url, { prompt, cache_salt: "tenant-a" })).body.usage.prompt_tokens_details.cached_tokens).toBe(64);
      expect((await complete(url, { prompt, model: "sql-lora" })).body.usage.prompt_tokens_details.cached_tokens).toBe(0);
      expect((await complete(url, { prompt, model: "sql-lora" })).body.usage.prompt_tokens_details.cached_tokens).toBe(64);
      // vLLM refuses an empty salt and an unknown model.
      expect((await complete(url, { prompt, cache_salt: "" })).status).toBe(400);
      expect((await complete(url, { prompt, cache_salt: "s".repeat(1025) })).status).toBe(400);
      expect((await complete(url, { prompt, model: "other-lora" })).status).toBe(404);
    });
  });

  test.each(["map", "array"] as const)("sim KV events (%s encoding) index exactly the router's hashes", async (format) => {
    await withEngine(async (url, batches) => {
      await complete(url, { prompt, model: "sql-lora", cache_salt: "tenant-a" });
      const stored = batches.flat().filter((e) => e.type === "BlockStored");
      expect(stored[0]).toMatchObject({ parentBlockHash: null, loraName: "sql-lora", extraKeys: [["sql-lora", "tenant-a"], ["sql-lora"], ["sql-lora"], ["sql-lora"]] });
      const ix = index(batches, format);
      expect(ix.findMatches(blockHashes(prompt, BS, { lora: "sql-lora", cacheSalt: "tenant-a" })).get("w")?.gpu).toBe(4);
      // Never credited to the base model, the adapter alone, or the salt alone.
      for (const other of [{}, { lora: "sql-lora" }, { cacheSalt: "tenant-a" }]) {
        expect(ix.findMatches(blockHashes(prompt, BS, other)).get("w")?.gpu ?? 0).toBe(0);
      }
    });
  });

  test("a salted request stored over several steps chains through its parent", async () => {
    const batches: KvEvent[][] = [];
    // A step budget of 32 tokens: the 70-token prompt is prefilled in three chunks (three events).
    const e = await startSimEngine({ port: 0, zeroDelay: true, maxNumBatchedTokens: 32, onKvEvents: (b) => batches.push(b) });
    try {
      await complete(e.url, { prompt, cache_salt: "s" });
      expect(batches.flat().filter((x) => x.type === "BlockStored").length).toBeGreaterThan(1);
      expect(index(batches, "map").findMatches(blockHashes(prompt, BS, { cacheSalt: "s" })).get("w")?.gpu).toBe(4);
    } finally {
      await e.stop();
    }
  });

  test.each([0, 1])("preprocess (%d tokenizer threads): cache_salt from the body and the adapter give the router's hashes, and say so", async (workers) => {
    // inlineMaxChars 0 with a thread: every cold piece goes through the worker's chain job.
    const pre = await createPreprocessor([{ name: "m", tokenizer: "", block_size: BS }], { workers, inlineMaxChars: 0 });
    try {
      const base = await pre.prepare("m", { prompt });
      expect(base.extraKeys).toEqual({ lora_name: null, cache_salt: null });
      const salted = await pre.prepare("m", { prompt, cache_salt: "tenant-a" }, { lora: "sql-lora" });
      expect(salted.extraKeys).toEqual({ lora_name: "sql-lora", cache_salt: "tenant-a" });
      expect(salted.blockHashes).toEqual(blockHashes(prompt, BS, { lora: "sql-lora", cacheSalt: "tenant-a" }));
      // Text prompts go through the piece memo: a salted prompt must not resume from the base chain.
      const text = "The quick brown fox jumps over the lazy dog. ".repeat(20);
      const plain = await pre.prepare("m", { prompt: text });
      const withSalt = await pre.prepare("m", { prompt: text, cache_salt: "x" });
      const again = await pre.prepare("m", { prompt: text });
      expect(withSalt.tokens).toBe(plain.tokens);
      expect(withSalt.blockHashes[0]).not.toBe(plain.blockHashes[0]);
      expect(again.blockHashes).toEqual(plain.blockHashes);
      const ids = await pre.model("m")!.encode(text, true);
      expect(withSalt.blockHashes).toEqual(blockHashes(ids, BS, { cacheSalt: "x" }));
      const chat = { messages: [{ role: "user", content: text }] };
      const lora = await pre.prepare("m", chat, { lora: "sql-lora" });
      const chatIds = await pre.model("m")!.encode(pre.model("m")!.render(chat), false);
      expect(lora.blockHashes).toEqual(blockHashes(chatIds, BS, { lora: "sql-lora" }));
      expect((await pre.prepare("m", chat)).blockHashes).toEqual(blockHashes(chatIds, BS));
      await expect(pre.prepare("m", { prompt: text, cache_salt: 5 as unknown as string })).rejects.toThrow(/cache_salt must be a string/);
    } finally {
      pre.close();
    }
  });
});
