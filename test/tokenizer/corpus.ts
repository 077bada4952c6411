// A varied corpus for tokenizer exactness checks: scripts, code, emoji, whitespace runs, numbers,
// special-token text and a long document.
export const CORPUS: string[] = [
  "Hello, world!",
  "The quick brown fox jumps over the lazy dog.",
  "  leading and trailing spaces  ",
  "tabs\tand\nnewlines\r\n\r\nand   multiple    spaces",
  "你好，世界！今天天气怎么样？我们去公园散步吧。",
  "日本語のテキストとカタカナ、ひらがな、漢字。",
  "한국어 문장도 토큰화합니다.",
  "Здравствуйте, как дела? Ελληνικά κείμενα. مرحبا بالعالم. שלום עולם",
  "emoji: 🤗🚀🔥 👩‍👩‍👧‍👦 🇫🇷 ❤️ skin tones 👍🏽",
  "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
  "const x = { a: [1, 2, 3], 'b': \"str\" };\n// comment\nfor (let i = 0; i < 10; i++) { console.log(`i=${i}`); }",
  "SELECT id, name FROM users WHERE created_at >= '2024-01-01' ORDER BY id DESC LIMIT 100;",
  "Numbers: 1234567890 3.14159 -42 1e-9 0x1F 1,000,000 2024-11-30T12:34:56Z",
  "URLs https://example.com/path?q=1&x=y#frag and emails a.b@c.de",
  "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
  "<think>\nreasoning here\n</think>\n\nanswer",
  "Mixed: café naïve résumé Zürich ß ﬁ Å ẞ İstanbul",
  "Zero\u200bwidth\u200djoiner and non\u00a0breaking space",
  "",
  "a",
  "\n\n\n",
  "Ünïcödé ŝţŕïñĝ with combining a\u0301 e\u0308",
];

/** A long English/code document (about 20k characters) built deterministically. */
export function longText(): string {
  const words = ["system", "prompt", "cache", "router", "token", "latency", "throughput", "block", "prefix", "engine"];
  const parts: string[] = [];
  for (let i = 0; i < 2500; i++) {
    parts.push(words[(i * 7) % words.length]!);
    if (i % 13 === 0) parts.push(`${i * 31}.`);
    if (i % 97 === 0) parts.push("\n\n```ts\nconst v = f(" + i + ");\n```\n");
    if (i % 211 === 0) parts.push("中文段落和emoji🙂");
  }
  return parts.join(" ");
}
