import { expect, test } from "bun:test";
import type { KvEvent } from "../../../src/engine/sim/blocks.ts";
import { ZERO_COST } from "../../../src/engine/sim/cost.ts";
import { startSimEngine } from "../../../src/engine/sim/server.ts";

test("HTTP traffic produces per-step KV event batches; /reset_prefix_cache clears them all", async () => {
  const batches: KvEvent[][] = [];
  const e = await startSimEngine({ port: 0, zeroDelay: true, onKvEvents: (b) => batches.push(b) });
  try {
    expect(e.options.cost).toEqual(ZERO_COST);
    const prompt = Array.from({ length: 40 }, (_, i) => 1000 + i);
    const r = await fetch(`${e.url}/v1/completions`, { method: "POST", body: JSON.stringify({ prompt, max_tokens: 1 }) });
    expect(r.status).toBe(200);
    const stored = batches.flat().filter((x) => x.type === "BlockStored");
    // 40 prompt tokens = 2 full blocks of 16, stored in one event with no parent.
    expect(stored).toHaveLength(1);
    expect(stored[0]).toMatchObject({ parentBlockHash: null, tokenIds: prompt.slice(0, 32), blockSize: 16 });
    const hashes = stored[0]!.type === "BlockStored" ? stored[0]!.blockHashes : [];
    expect(hashes).toHaveLength(2);
    for (const h of hashes) expect(h >= 0n && h < 1n << 64n).toBe(true);
    expect((await fetch(`${e.url}/reset_prefix_cache`, { method: "POST" })).status).toBe(200);
    expect(batches.at(-1)).toEqual([{ type: "AllBlocksCleared" }]);
  } finally {
    await e.stop();
  }
});
