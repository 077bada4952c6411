// How a streamed fetch body is read, and what each way costs the GC: every JS way of reading Bun's
// fetch body stream (getReader().read(), readMany(), for await, Bun.readableStreamToArray) goes
// through Bun's lazy native stream, whose first pull allocates a 256 KiB view (autoAllocateChunkSize
// default in lazyLoadStream, oven-sh/bun src/js/builtins/ReadableStreamInternals.ts; the native side,
// ZigGlobalObject__createNativeReadableStream, passes no chunk size). Only Response.bytes() (no
// stream) avoids it. One zero-delay sim engine; per mode a child process reads N streamed chats
// (the bench's chat, 8 tokens + usage) with BUN_JSC_logGC=true; prints µs per request and the
// child's collections, and those JSC started on the allocation budget with its last oversized size.
// Run: ./node_modules/.bin/bun bench/stream-read-modes.ts [requests=1000]
import { resolve } from "node:path";
import { loadavg } from "node:os";
import { chatBody, simEngineArgs } from "./lib/chat-once.ts";
import { freePort } from "./lib/child.ts";

const MODES = ["reader", "readMany", "forawait", "toArray", "bytes"] as const;
type Mode = (typeof MODES)[number];

async function readOnce(url: string, mode: Mode): Promise<number> {
  const res = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: chatBody(true) });
  let n = 0;
  if (mode === "reader") {
    const r = res.body!.getReader();
    for (let x = await r.read(); !x.done; x = await r.read()) n += x.value.byteLength;
  } else if (mode === "readMany") {
    const r = res.body!.getReader() as unknown as { readMany(): Promise<{ done: boolean; value?: Uint8Array[] }> };
    for (;;) {
      const x = await r.readMany();
      for (const v of x.value ?? []) n += v.byteLength;
      if (x.done) break;
    }
  } else if (mode === "forawait") {
    for await (const v of res.body as unknown as AsyncIterable<Uint8Array>) n += v.byteLength;
  } else if (mode === "toArray") {
    for (const v of await Bun.readableStreamToArray(res.body!)) n += (v as Uint8Array).byteLength;
  } else n = (await res.bytes()).byteLength;
  if (n === 0) throw new Error("empty body");
  return n;
}

if (process.argv[2] === "--child") {
  const [url, mode, N] = [process.argv[3]!, process.argv[4] as Mode, Number(process.argv[5])];
  for (let i = 0; i < 100; i++) await readOnce(url, mode);
  const t0 = performance.now();
  for (let i = 0; i < N; i++) await readOnce(url, mode);
  console.log(`US ${((performance.now() - t0) * 1000) / N}`);
  process.exit(0);
}

const N = Number(process.argv[2] ?? 1000);
const ROOT = resolve(import.meta.dir, "..");
const port = await freePort();
const sim = Bun.spawn([process.execPath, ...simEngineArgs(port)], { cwd: ROOT, stdout: "ignore", stderr: "ignore" });
const url = `http://127.0.0.1:${port}`;
try {
  for (let i = 0; i < 100; i++) {
    if (await fetch(`${url}/health`).then((r) => r.ok, () => false)) break;
    await Bun.sleep(100);
  }
  console.log(`stream read modes: ${N} streamed chats per mode (after 100 warm-up), one child each; load average ${loadavg().map((l) => l.toFixed(2)).join(" ")}`);
  for (const mode of MODES) {
    const p = Bun.spawn([process.execPath, import.meta.path, "--child", url, mode, String(N)], { stdout: "pipe", stderr: "pipe", env: { ...process.env, BUN_JSC_logGC: "true" } });
    const [out, err] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text()]);
    await p.exited;
    const gcs = err.match(/START /g)?.length ?? 0;
    const budget = [...err.matchAll(/Requesting GC because bytes allocated.*last oversized: (\d+)/g)];
    const us = /US ([\d.]+)/.exec(out)?.[1];
    console.log(`${mode.padEnd(9)} ${Number(us).toFixed(0).padStart(6)} µs/request   GCs ${String(gcs).padStart(3)} (${budget.length} on the allocation budget${budget.length ? `, last oversized ${budget.at(-1)![1]} B` : ""})`);
  }
} finally {
  sim.kill();
  await sim.exited;
}
