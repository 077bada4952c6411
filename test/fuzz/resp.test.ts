// Issue 22 "Proof": seeded fuzzing of the RESP request parser (src/tier/resp/parser.ts). A
// grammar-aware generator writes pipelines of multibulk and inline commands (argument sizes around
// the limits, large bulks through the scratch path, AUTH-required and open connections), then
// mutates some of them byte-wise and feeds each in random chunks. Properties: next() never throws
// (its only error is the `{error}` result, final), a valid pipeline parses back exactly, two
// chunkings of the same bytes agree (up to Redis' read-dependent inline bound), and between commands the reader
// never holds more unparsed input than the inline bound. Budgets: test/helpers/fuzz.ts.
// Replay a failure: HERD_FUZZ_SEED=<seed> HERD_FUZZ_ONLY=<case> bun test test/fuzz/resp.test.ts
import { expect, test } from "bun:test";
import type { Rng } from "../../src/core/rng.ts";
import { latin1, RespReader, type ArgBytesMax, type RespLimits } from "../../src/tier/resp/parser.ts";
import { concatBytes, fuzzSettings, mutate, pick, randomBytes, runFuzz, splitPoints, type StepTimer } from "../helpers/fuzz.ts";

const settings = fuzzSettings(20261222, 400);

const LIMITS: RespLimits = {
  maxInlineBytes: 512,
  maxMultibulk: 1000,
  maxBulkBytes: 1 << 20,
  unauthMultibulk: 10,
  unauthBulkBytes: 16 * 1024,
  commandBytesMax: (1 << 20) + (256 << 10),
};
const GET_KEY_MAX = 1024;
const argMax: ArgBytesMax = (name, index) => (name && index === 1 && latin1(name).toUpperCase() === "GET" ? GET_KEY_MAX : LIMITS.maxBulkBytes);

const enc = (s: string) => new TextEncoder().encode(s);
const DICTIONARY = ["*", "$", "\r\n", "\n", "*2147483648\r\n", "$-1\r\n", "$1048577\r\n", "*99999999999999999\r\n", "PING\r\n", "*-1\r\n", "*0\r\n", "$01\r\n", " \t "].map(enc);

type Command = { args: Uint8Array[]; inline: boolean };

function argument(rng: Rng, auth: boolean, name: string | undefined, index: number): Uint8Array {
  const r = rng.int(20);
  let n: number;
  if (r < 12) n = rng.int(16);
  else if (r < 17) n = rng.int(2000);
  else if (r < 19) n = pick(rng, [0, 1, 1023, 1024, 16384]);
  else n = 64 * 1024 + rng.int(300 * 1024); // the scratch-buffer path
  if (auth) n = Math.min(n, LIMITS.unauthBulkBytes);
  if (name === "GET" && index === 1) n = Math.min(n, GET_KEY_MAX);
  const out = new Uint8Array(n);
  // Large arguments repeat a random 251-byte pattern (drawing every byte made the suite slow).
  const period = Math.min(n, 251);
  for (let i = 0; i < period; i++) out[i] = rng.int(256);
  for (let i = period; i < n; i++) out[i] = out[i - period]! ^ (i & 0xff);
  return out;
}

function command(rng: Rng, auth: boolean): Command {
  if (rng.int(4) === 0) {
    // Inline: words without blanks, as redis-cli's inline mode and telnet send.
    const words = Array.from({ length: 1 + rng.int(5) }, () => {
      const w = Array.from({ length: 1 + rng.int(12) }, () => pick(rng, [..."abcXYZ019-_:{}"]).charCodeAt(0));
      return Uint8Array.from(w);
    });
    return { args: words, inline: true };
  }
  const name = pick(rng, ["GET", "SET", "PING", "AUTH", "HELLO", "EXISTS", "x"]);
  const argc = auth ? rng.int(LIMITS.unauthMultibulk) : rng.int(rng.int(10) === 0 ? 40 : 5);
  const args: Uint8Array[] = [enc(name)];
  for (let i = 1; i <= argc; i++) args.push(argument(rng, auth, name, i));
  // Keep the valid pipeline inside the per-command bound.
  let total = 0;
  const kept = args.filter((a) => (total += a.length) <= LIMITS.commandBytesMax!);
  return { args: kept, inline: false };
}

function encode(c: Command, rng: Rng): Uint8Array {
  if (c.inline) return concatBytes([c.args.flatMap((a, i) => (i === 0 ? [a] : [enc(pick(rng, [" ", "  ", "\t"])), a])), [enc(pick(rng, ["\r\n", "\n"]))]].flat());
  const parts: Uint8Array[] = [enc(`*${c.args.length}\r\n`)];
  for (const a of c.args) parts.push(enc(`$${a.length}\r\n`), a, enc("\r\n"));
  return concatBytes(parts);
}

type Result = { args: Uint8Array[]; inline: boolean } | { error: string };

/** Feed `chunks` and collect every result (copied, not Buffer#slice, which is a view: large arguments live in reused buffers). */
function parse(chunks: Uint8Array[], auth: boolean, timer: StepTimer): Result[] {
  const reader = new RespReader(LIMITS, () => auth, argMax);
  const out: Result[] = [];
  for (const chunk of chunks) {
    timer.step("push", () => reader.push(chunk));
    for (;;) {
      const r = timer.step("next", () => reader.next());
      if (r === undefined) break;
      if ("error" in r) {
        expect(r.error).toStartWith("Protocol error: ");
        out.push(r);
        return out;
      }
      out.push({ args: r.args.map((a) => new Uint8Array(a)), inline: r.inline });
    }
    // Between commands only a partial line (≤ the inline bound) or a bulk's trailing CRLF waits.
    if (reader.unparsedBytes > LIMITS.maxInlineBytes) throw new Error(`${reader.unparsedBytes} unparsed bytes held (bound ${LIMITS.maxInlineBytes})`);
    if (reader.bufferedBytes > LIMITS.commandBytesMax! + LIMITS.maxInlineBytes) throw new Error(`${reader.bufferedBytes} bytes buffered`);
  }
  return out;
}

const same = (a: Result[], b: Result[]) => {
  expect(a.length).toBe(b.length);
  for (let i = 0; i < a.length; i++) {
    const x = a[i]!;
    const y = b[i]!;
    if ("error" in x || "error" in y) {
      expect("error" in x && "error" in y ? x.error === y.error : false).toBe(true);
      continue;
    }
    expect(x.inline).toBe(y.inline);
    expect(x.args.length).toBe(y.args.length);
    for (let j = 0; j < x.args.length; j++) expect(Buffer.from(x.args[j]!).equals(Buffer.from(y.args[j]!))).toBe(true);
  }
};

/**
 * Two chunkings agree, except that Redis refuses a line over the inline bound only while its newline
 * has not arrived (redis/redis networking.c processInlineBuffer): a long line in one read passes,
 * the same line split is "too big". herd matches that byte for byte (test/tier/resp.test.ts), so
 * such an error may end one chunking early; everything before it must still agree.
 */
function sameUpToTooBig(a: Result[], b: Result[]): void {
  const tooBig = (r: Result[]) => {
    const last = r[r.length - 1];
    return last !== undefined && "error" in last && last.error.includes("too big");
  };
  if (tooBig(a) || tooBig(b)) {
    const n = Math.min(a.length, b.length) - 1;
    return same(a.slice(0, n), b.slice(0, n));
  }
  same(a, b);
}

test(`seed ${settings.seed}: ${settings.cases} RESP pipelines, mutated and split`, async () => {
  const stats = await runFuzz("resp", settings, (rng, timer) => {
    const auth = rng.int(3) === 0;
    const commands = Array.from({ length: 1 + rng.int(12) }, () => command(rng, auth));
    const valid = concatBytes(commands.map((c) => encode(c, rng)));
    const mode = rng.int(10);
    const bytes = mode < 4 ? valid : mode < 9 ? mutate(rng, valid, DICTIONARY) : randomBytes(rng, 4096);
    timer.generated();
    const a = parse(splitPoints(rng, bytes), auth, timer);
    const b = parse(splitPoints(rng, bytes), auth, timer);
    sameUpToTooBig(a, b);
    if (bytes === valid) same(a, commands);
  });
  console.log(`resp fuzz: ${stats.cases} cases, longest step ${stats.longestStepMs.toFixed(1)} ms, longest loop stall ${stats.longestStallMs.toFixed(1)} ms (case ${stats.stallCase}), RSS +${(stats.rssGrowthBytes / 2 ** 20).toFixed(1)} MiB`);
}, 120_000);

test("declared lengths over the bounds are refused at the header, before any buffer of that size", () => {
  for (const [input, auth] of [
    ["*1\r\n$1048577\r\n", false],
    ["*2\r\n$3\r\nGET\r\n$1025\r\n", false],
    ["*11\r\n", true],
    ["*1\r\n$16385\r\n", true],
    ["*2147483648\r\n", false],
  ] as const) {
    const r = new RespReader(LIMITS, () => auth, argMax);
    r.push(enc(input));
    const got = r.next();
    expect(got && "error" in got).toBe(true);
    expect(r.bufferedBytes).toBeLessThan(64);
  }
});
