// Preprocessed prompts drive the kv policy end to end (without HTTP): the hashes the preprocessor
// computes are the ones the index keys on, so a worker whose engine reported a shared document's
// blocks wins its follow-up questions, and explain names the overlap. Uses the built-in tokenizer
// (no files, fast); the Qwen3 equivalence lives in tokenize-cache.test.ts.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { createPreprocessor, type Preprocessor } from "../../src/preprocess/index.ts";
import { loadTokenizer } from "../../src/tokenizer/index.ts";
import { blockHashes } from "../../src/kv/hash.ts";
import { BlockIndex } from "../../src/kv/block-index.ts";
import { Router } from "../../src/router/router.ts";
import { VirtualClock } from "../../src/core/clock.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { longText } from "../tokenizer/corpus.ts";
import { registryWith, req, routerConfig, worker } from "../router/fixtures.ts";

let pre: Preprocessor;
beforeAll(async () => {
  pre = await createPreprocessor([{ name: "m", tokenizer: "", block_size: 16 }], { workers: 0 });
});
afterAll(() => pre?.close());

const handbook = longText();
const ask = (q: string) => ({ messages: [{ role: "system", content: handbook }, { role: "user", content: q }] });

test("the built-in tokenizer's pieces match whole-text encoding, and prompts hash like the engine's tokens", async () => {
  const tok = await loadTokenizer(null);
  const p = await pre.prepare("m", ask("What is the leave policy?"));
  const ids = tok.encode(tok.applyChatTemplate(ask("What is the leave policy?").messages, { addGenerationPrompt: true }));
  expect(p.tokens).toBe(ids.length);
  expect(p.blockHashes).toEqual(blockHashes(ids, 16));
  expect(p.pieces.total).toBeGreaterThan(1); // split on <|im_start|>/<|im_end|>
});

test("follow-up questions on a shared document go to the worker holding it", async () => {
  const index = new BlockIndex();
  const registry = registryWith([worker("a"), worker("b"), worker("c")]);
  const base = routerConfig();
  const router = new Router({
    config: routerConfig({ policy: "kv", kv: { ...base.kv, predicted_ttl_ms: 0 } }),
    registry,
    clock: new VirtualClock(),
    rng: new SeededRng(8),
    kvIndex: index,
  });
  // Worker b's engine reported the document's blocks (all but the question's).
  const first = await pre.prepare("m", ask("hello"));
  index.apply("b", { kind: "stored", medium: "gpu", hashes: first.blockHashes.slice(0, -2) });
  for (let i = 0; i < 5; i++) {
    const p = await pre.prepare("m", ask(`question ${i}: how many vacation days do I get?`));
    expect(p.pieces.reused).toBeGreaterThan(0);
    const route = req({ promptTokens: p.tokens, blockHashes: p.blockHashes, blockSize: p.blockSize });
    const { decision } = router.explain(route);
    expect(decision.chosen).toBe("b");
    const b = decision.candidates.find((c) => c.worker === "b")!.terms;
    expect(b.overlap_gpu).toBe(first.blockHashes.length - 2);
    expect(decision.predictedCachedTokens).toBe((first.blockHashes.length - 2) * 16);
    const { lease } = router.routeAndBook(route);
    lease.release();
  }
});
