// Worst-case bodies (issue 10): does one client sending bodies at the limits stall everybody else?
// `herd run` with the embedded default (two sim engines, kv policy, built-in tokenizer) as a
// subprocess; this process probes `/health` and a small chat request, first alone (baseline), then
// while `attackers` clients each loop over worst-case bodies, in the same run. Prints p50/p99/max of
// both probes per phase, the loaded/baseline ratio, herd's peak RSS (VmHWM/VmRSS of the herd
// process alone, not its engines), and how the attack bodies were answered.
//
// Run: ./node_modules/.bin/bun bench/worst-case-body.ts [seconds=15] [attackers=4] [root=.]
// (root: another checkout of herd to measure, e.g. the code before the fix.)
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { freePort } from "./lib/child.ts";

const SECONDS = Number(process.argv[2] === "--attack" ? 0 : (process.argv[2] ?? 15));
const ATTACKERS = Number(process.argv[3] ?? 4);
const ROOT = resolve(process.argv[4] ?? resolve(import.meta.dir, ".."));
const MODEL = "herd-sim";
const PROBE_TIMEOUT_MS = 10_000;
const LIMITS = { maxBodyBytes: 10 * 1024 * 1024, maxMessages: 4096, maxPromptChars: 4 * 1024 * 1024, maxJsonValues: 131_072 };

/** Fill a JSON array up to the body limit with `unit` items. */
function fill(prefix: string, unit: (i: number) => string, suffix: string, limitBytes: number, maxItems = Infinity): string {
  const parts = [prefix];
  let len = prefix.length + suffix.length;
  for (let i = 0; i < maxItems; i++) {
    const u = (i ? "," : "") + unit(i);
    if (len + u.length > limitBytes) break;
    parts.push(u);
    len += u.length;
  }
  parts.push(suffix);
  return parts.join("");
}

const UNIT = "word <|im_end|>w ";
const chatPrefix = `{"model":"${MODEL}","max_tokens":1,"messages":[`;
const msg = (i: number) => `{"role":"${i % 2 ? "assistant" : "user"}","content":"w${i % 1000}"}`;
const ALL_ATTACKS: { name: string; path: string; body: string }[] = [
  // The issue's body: 200,000 one-word messages (6.8 MB).
  { name: "200k messages", path: "/v1/chat/completions", body: fill(chatPrefix, msg, "]}", LIMITS.maxBodyBytes, 200_000) },
  // Just under the caps: as many messages as allowed.
  { name: "max_messages", path: "/v1/chat/completions", body: fill(chatPrefix, msg, "]}", LIMITS.maxBodyBytes, LIMITS.maxMessages) },
  // Deep nesting filling the body limit.
  { name: "10 MiB nesting", path: "/v1/chat/completions", body: `{"model":"${MODEL}","messages":[{"role":"user","content":"x"}],"x":${"[".repeat(LIMITS.maxBodyBytes / 2 - 64)}${"]".repeat(LIMITS.maxBodyBytes / 2 - 64)}}` },
  // Token ids filling the body limit (5M values).
  { name: "10 MiB token ids", path: "/v1/completions", body: fill(`{"model":"${MODEL}","max_tokens":1,"prompt":[`, (i) => String(i % 10), "]}", LIMITS.maxBodyBytes) },
  // One prompt at max_prompt_chars, added tokens every 16 characters (many pieces).
  { name: "max_prompt_chars", path: "/v1/completions", body: JSON.stringify({ model: MODEL, max_tokens: 1, prompt: UNIT.repeat(Math.floor(LIMITS.maxPromptChars / UNIT.length)) }) },
];

// HERD_BENCH_ATTACKS=name,name… keeps only those bodies (to see which one costs what).
const only = process.env.HERD_BENCH_ATTACKS?.split(",");
const ATTACKS = only ? ALL_ATTACKS.filter((a) => only.includes(a.name)) : ALL_ATTACKS;

function rssKb(pid: number): { rss: number; hwm: number } {
  try {
    const s = readFileSync(`/proc/${pid}/status`, "utf8");
    const get = (k: string) => Number(new RegExp(`${k}:\\s+(\\d+)`).exec(s)?.[1] ?? 0);
    return { rss: get("VmRSS"), hwm: get("VmHWM") };
  } catch {
    return { rss: 0, hwm: 0 };
  }
}

async function timed(url: string, init?: RequestInit): Promise<number> {
  const t0 = performance.now();
  try {
    const res = await fetch(url, { ...init, signal: AbortSignal.timeout(PROBE_TIMEOUT_MS) });
    await res.arrayBuffer();
    if (res.status !== 200) return Infinity;
  } catch {
    return Infinity; // timed out or failed: counted as beyond every percentile
  }
  return performance.now() - t0;
}

const small = JSON.stringify({ model: MODEL, max_tokens: 1, messages: [{ role: "user", content: "hello there" }] });

/** Probe /health and a small request back to back for `seconds`; sample RSS meanwhile. */
async function probe(url: string, pid: number, seconds: number): Promise<{ health: number[]; small: number[]; peakRssKb: number }> {
  const health: number[] = [];
  const smallMs: number[] = [];
  let peak = 0;
  const end = performance.now() + seconds * 1000;
  const sampler = (async () => {
    while (performance.now() < end) {
      peak = Math.max(peak, rssKb(pid).rss);
      await Bun.sleep(50);
    }
  })();
  const loop = async (out: number[], f: () => Promise<number>) => {
    while (performance.now() < end) {
      out.push(await f());
      await Bun.sleep(20);
    }
  };
  await Promise.all([
    loop(health, () => timed(`${url}/health`)),
    loop(smallMs, () => timed(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: small })),
    sampler,
  ]);
  return { health, small: smallMs, peakRssKb: peak };
}

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? NaN;
}
const f = (ms: number) => (ms === Infinity ? `>${PROBE_TIMEOUT_MS}` : ms.toFixed(1));

/** The attack loop, run in a child process so the probing client's own event loop stays idle. */
async function attack(url: string, n: number, seconds: number): Promise<void> {
  const answers = new Map<string, number>();
  const ms: number[] = [];
  const end = performance.now() + seconds * 1000;
  const one = async (k: number) => {
    for (let i = k; performance.now() < end; i++) {
      const a = ATTACKS[i % ATTACKS.length]!;
      const t = performance.now();
      let status = "error";
      try {
        const res = await fetch(`${url}${a.path}`, { method: "POST", headers: { "content-type": "application/json" }, body: a.body, signal: AbortSignal.timeout(120_000) });
        const j = (await res.json().catch(() => ({}))) as { error?: { code?: string } };
        status = `${res.status}${j.error?.code ? ` ${j.error.code}` : ""}`;
      } catch (e) {
        status = (e as Error).name;
      }
      ms.push(performance.now() - t);
      const key = `${a.name} → ${status}`;
      answers.set(key, (answers.get(key) ?? 0) + 1);
    }
  };
  await Promise.all(Array.from({ length: n }, (_, k) => one(k)));
  console.log(JSON.stringify({ answers: [...answers], ms }));
}

async function main(): Promise<void> {
  const port = await freePort();
  const proc = Bun.spawn([process.execPath, resolve(ROOT, "src/cli.ts"), "run", "--listen", `127.0.0.1:${port}`], { cwd: ROOT, stdout: "ignore", stderr: "ignore" });
  const url = `http://127.0.0.1:${port}`;
  try {
    const t0 = performance.now();
    while ((await fetch(`${url}/health`).then((r) => r.status, () => 0)) !== 200) {
      if (performance.now() - t0 > 60_000) throw new Error("herd did not become ready in 60 s");
      await Bun.sleep(200);
    }
    // Warm-up: JIT, tokenizer threads, engines.
    for (let i = 0; i < 20; i++) await timed(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: small });
    const base = await probe(url, proc.pid, SECONDS);
    const baseRss = rssKb(proc.pid);

    const child = Bun.spawn([process.execPath, import.meta.path, "--attack", url, String(ATTACKERS), String(SECONDS + 1)], { stdout: "pipe", stderr: "inherit" });
    await Bun.sleep(1000); // bodies in flight before probing
    const loaded = await probe(url, proc.pid, SECONDS);
    const out = JSON.parse((await new Response(child.stdout).text()).trim().split("\n").pop() ?? "{}") as { answers: [string, number][]; ms: number[] };
    const answers = new Map(out.answers);
    const attackMs = out.ms;
    const after = rssKb(proc.pid);

    console.log(`herd worst-case bodies: ${ROOT}, ${SECONDS} s per phase, ${ATTACKERS} attackers (body sizes: ${ATTACKS.map((a) => `${a.name} ${(a.body.length / 2 ** 20).toFixed(1)} MiB`).join(", ")})`);
    console.log("");
    console.log("probe (ms)          baseline p50 / p99 / max     loaded p50 / p99 / max       p99 ratio   n (base/loaded)");
    for (const [name, b, l] of [["/health", base.health, loaded.health], ["small chat", base.small, loaded.small]] as const) {
      const ratio = pct(l, 0.99) / pct(b, 0.99);
      console.log(
        `${name.padEnd(18)}  ${[pct(b, 0.5), pct(b, 0.99), Math.max(...b)].map(f).join(" / ").padEnd(27)}  ${[pct(l, 0.5), pct(l, 0.99), Math.max(...l)].map(f).join(" / ").padEnd(27)}  ${Number.isFinite(ratio) ? ratio.toFixed(2) : "∞"}        ${b.length}/${l.length}`,
      );
    }
    console.log("");
    console.log(`herd RSS (MiB): baseline peak ${(base.peakRssKb / 1024).toFixed(0)}, loaded peak ${(loaded.peakRssKb / 1024).toFixed(0)}, high-water mark ${(after.hwm / 1024).toFixed(0)}, after ${(after.rss / 1024).toFixed(0)} (idle after warm-up ${(baseRss.rss / 1024).toFixed(0)})`);
    console.log(`attack bodies answered: ${attackMs.length} (p50 ${f(pct(attackMs, 0.5))} ms, max ${f(Math.max(...attackMs))} ms)`);
    for (const [k, n] of [...answers].sort()) console.log(`  ${k}: ${n}`);
  } finally {
    proc.kill("SIGTERM");
    await Promise.race([proc.exited, Bun.sleep(10_000)]);
    proc.kill("SIGKILL");
  }
}

if (process.argv[2] === "--attack") await attack(process.argv[3]!, Number(process.argv[4]), Number(process.argv[5]));
else await main();
