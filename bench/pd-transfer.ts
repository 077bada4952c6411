// P/D KV transfer in the simulated engine: one prefill and one decode sim engine (this process,
// zero-delay step model so only the transfer is timed), a prefill leg of P tokens, then the decode
// leg's pull of its full blocks over the loopback side channel. Prints, per bytes-per-block figure,
// the decode leg's time minus a same-prompt decode leg with no remote blocks (the baseline measured
// in the same run), per block and as MB/s. Unpaced: this is loopback TCP, an upper bound far above
// nothing real; `--kv-transfer-bytes-per-s` models a link.
// Run: ./node_modules/.bin/bun bench/pd-transfer.ts [prompt_tokens=4096] [reps=5]
import { parseKvTransferConfig } from "../src/engine/sim/kv-transfer-config.ts";
import { QWEN3_8B_KV_BYTES_PER_BLOCK } from "../src/engine/sim/options.ts";
import { startSimEngine } from "../src/engine/sim/server.ts";
import { kvTransferParamsOf, vllmDecodeBody, vllmPrefillBody } from "../src/pd/legs.ts";

const PROMPT_TOKENS = Number(process.argv[2] ?? 4096);
const REPS = Number(process.argv[3] ?? 5);
const kv = (role: string) => parseKvTransferConfig(JSON.stringify({ kv_connector: "NixlConnector", kv_role: role }));
const post = async (url: string, body: unknown) => {
  const r = await fetch(`${url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  if (r.status !== 200) throw new Error(`${r.status} ${await r.text()}`);
  return (await r.json()) as Record<string, unknown>;
};
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

for (const bytesPerBlock of [16 * 1024, 256 * 1024, QWEN3_8B_KV_BYTES_PER_BLOCK]) {
  const common = { port: 0, zeroDelay: true, sideChannelHost: "127.0.0.1", sideChannelPort: 0, kvBytesPerBlock: bytesPerBlock } as const;
  const p = await startSimEngine({ ...common, kvTransfer: kv("kv_producer") });
  const d = await startSimEngine({ ...common, kvTransfer: kv("kv_consumer") });
  const withPull: number[] = [];
  const without: number[] = [];
  let blocks = 0;
  for (let i = 0; i < REPS; i++) {
    // A fresh prompt each time, so the decode engine's own prefix cache never helps.
    const client = { model: "sim", prompt: Array.from({ length: PROMPT_TOKENS }, (_, k) => 100 + ((k * 7 + i * 13) % 50_000)), max_tokens: 1 };
    const params = kvTransferParamsOf(await post(p.url, vllmPrefillBody(client)))!;
    blocks = (params.remote_block_ids as number[][])[0]!.length;
    let t0 = performance.now();
    await post(d.url, vllmDecodeBody(client, params));
    withPull.push(performance.now() - t0);
    const other = { ...client, prompt: client.prompt.map((x) => x + 1) };
    t0 = performance.now();
    await post(d.url, other);
    without.push(performance.now() - t0);
  }
  const transferMs = Math.max(0, median(withPull) - median(without));
  const mb = (blocks * bytesPerBlock) / 2 ** 20;
  console.log(
    `${String(bytesPerBlock).padStart(8)} B/block  ${blocks} blocks (${mb.toFixed(1)} MiB): decode leg ${median(withPull).toFixed(1)} ms vs ${median(without).toFixed(1)} ms without pull → ` +
      `${((transferMs / blocks) * 1000).toFixed(1)} µs/block, ${(mb / (transferMs / 1000)).toFixed(0)} MiB/s`,
  );
  await p.stop();
  await d.stop();
}
