import { expect, test } from "bun:test";
import { hashBlock, hashBlockOf } from "../../../src/engine/sim/blocks.ts";

// The reference layout, written with a DataView: parent u64 LE ‖ token ids u32 LE, xxh3-64 seeded.
function reference(seed: bigint, parent: bigint | null, tokens: readonly number[]): bigint {
  const view = new DataView(new ArrayBuffer(8 + 4 * tokens.length));
  view.setBigUint64(0, parent ?? 0n, true);
  tokens.forEach((t, i) => view.setUint32(8 + 4 * i, t >>> 0, true));
  return BigInt(Bun.hash.xxHash3(new Uint8Array(view.buffer), seed));
}

test("block hashes through the reused buffer equal the reference layout, for any block length and split", () => {
  const prompt = Array.from({ length: 40 }, (_, i) => (i * 104_729) % 151_936);
  const out = [151_645, 7, 2 ** 32 - 1];
  const seq = [...prompt, ...out];
  for (const n of [16, 1, 100, 16]) {
    const ids = Array.from({ length: n }, (_, i) => i * 31 + 5);
    expect(hashBlock(3n, 99n, ids)).toBe(reference(3n, 99n, ids));
    expect(hashBlock(3n, null, Uint32Array.from(ids))).toBe(reference(3n, null, ids));
  }
  for (const [from, to] of [[0, 16], [16, 32], [32, 43], [40, 43], [30, 42]] as const) {
    const want = reference(7n, 12345n, seq.slice(from, to));
    expect(hashBlockOf(7n, 12345n, prompt, out, from, to)).toBe(want);
    expect(hashBlockOf(7n, 12345n, Uint32Array.from(prompt), out, from, to)).toBe(want);
  }
});
