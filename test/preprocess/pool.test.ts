// The tokenizer worker pool: ids equal the main thread's, the queue is bounded (503, not memory),
// close() fails what is pending with a typed error, and cold prompts leave the event loop free.
import { expect, test } from "bun:test";
import { TokenizerPool } from "../../src/preprocess/pool.ts";
import { loadTokenizer } from "../../src/tokenizer/index.ts";
import { CORPUS } from "../tokenizer/corpus.ts";

test("encodes like the main thread, bounded queue, typed errors on close", async () => {
  const pool = new TokenizerPool("", { workers: 2, maxPendingJobs: 3 });
  try {
    await pool.ready();
    const tok = await loadTokenizer(null);
    const got = await pool.encode(CORPUS);
    expect(got.map((a) => [...a])).toEqual(CORPUS.map((s) => tok.encode(s, { addSpecialTokens: false })));
    const jobs = [pool.encode(["a"]), pool.encode(["b"]), pool.encode(["c"])];
    await expect(pool.encode(["d"])).rejects.toMatchObject({ status: 503, code: "tokenizer_overloaded" });
    await Promise.all(jobs);
    expect(pool.pendingJobs).toBe(0);
    const pending = pool.encode(["x".repeat(200_000)]);
    pool.close();
    await expect(pending).rejects.toMatchObject({ status: 503, code: "shutting_down" });
    await expect(pool.encode(["y"])).rejects.toMatchObject({ code: "shutting_down" });
  } finally {
    pool.close();
  }
});

test("a bad tokenizer directory fails ready() with a typed error, never an unhandled rejection", async () => {
  const pool = new TokenizerPool("/nonexistent-herd-tokenizer", { workers: 1 });
  try {
    await expect(pool.ready()).rejects.toMatchObject({ code: "tokenizer_invalid" });
  } finally {
    pool.close();
  }
});
