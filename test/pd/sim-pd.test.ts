// P/D end to end over two real sim-engine processes (prefill and decode, each with vLLM's
// --kv-transfer-config and its own side channel from VLLM_NIXL_SIDE_CHANNEL_HOST/_PORT), driven by
// the official `openai` client doing the two legs with src/pd/legs.ts, as vLLM's toy proxy does.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { type ChildProcess, spawn } from "node:child_process";
import { resolve } from "node:path";
import OpenAI from "openai";
import { pdEngineFlags } from "../../src/pd/engine-flags.ts";
import { kvTransferParamsOf, vllmDecodeBody, vllmPrefillBody } from "../../src/pd/legs.ts";
import { freePort } from "../helpers/ports.ts";

const MAIN = resolve(import.meta.dir, "../../src/engine/sim/main.ts");
const BYTES_PER_BLOCK = 64 * 1024;

interface Proc {
  child: ChildProcess;
  url: string;
  sideChannelPort: number;
}

async function startEngine(role: "prefill" | "decode", extraArgs: string[] = []): Promise<Proc> {
  const sideChannelPort = await freePort();
  // The flags and environment herd's drivers give a P/D worker (src/pd/engine-flags.ts).
  const pd = { min_prefill_tokens: 0, nixl_metadata: "none", nixl_metadata_host: "127.0.0.1", nixl_metadata_idle_timeout_ms: 0, kv_load_failure_policy: "fail", prefill_queue_max: 8 } as const;
  const flags = pdEngineFlags({ kind: "sim", role, pd, advertise: "127.0.0.1", ports: { sideChannel: { port: sideChannelPort, span: 1 } }, nixlMetadataEndpoint: null });
  const child = spawn(process.execPath, [MAIN, "--port", "0", "--time-scale", "20", "--kv-bytes-per-block", String(BYTES_PER_BLOCK), ...flags.args, ...extraArgs], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, ...flags.env },
  });
  const url = await new Promise<string>((ok, fail) => {
    let out = "";
    child.stdout!.on("data", (b: Buffer) => {
      out += b.toString();
      const m = /Starting vLLM API server 0 on (\S+)/.exec(out);
      if (m && out.includes("Application startup complete.")) ok(m[1]!);
    });
    child.on("exit", (code) => fail(new Error(`sim engine exited ${code}: ${out}`)));
  });
  return { child, url, sideChannelPort };
}

let prefill: Proc;
let decode: Proc;
beforeAll(async () => {
  [prefill, decode] = await Promise.all([startEngine("prefill"), startEngine("decode")]);
});
afterAll(() => {
  for (const p of [prefill, decode]) p?.child.kill("SIGTERM");
});

const PROMPT = "Disaggregated serving splits the prompt pass from the token loop. ".repeat(40);

async function twoLegs(client: Record<string, unknown>, requestId: string, chat = false) {
  const p = new OpenAI({ baseURL: `${prefill.url}/v1`, apiKey: "x", maxRetries: 0 });
  const d = new OpenAI({ baseURL: `${decode.url}/v1`, apiKey: "x", maxRetries: 0 });
  const headers = { "X-Request-Id": requestId };
  const leg = vllmPrefillBody(client) as never;
  const first = (chat ? await p.chat.completions.create(leg, { headers }) : await p.completions.create(leg, { headers })) as unknown as Record<string, unknown>;
  const params = kvTransferParamsOf(first);
  return { params, d, headers, body: vllmDecodeBody(client, params) };
}

describe("two sim-engine processes, official openai client", () => {
  test("non-streaming: prefill answers params naming its side channel; decode answers with the prompt cached", async () => {
    const { params, d, headers, body } = await twoLegs({ model: "sim", prompt: PROMPT, max_tokens: 20, ignore_eos: true }, "pd-1");
    expect(params).toMatchObject({ do_remote_prefill: true, do_remote_decode: false, remote_host: "127.0.0.1", remote_port: prefill.sideChannelPort, tp_size: 1 });
    const blocks = (params!.remote_block_ids as number[][])[0]!.length;
    expect(blocks).toBeGreaterThan(10);
    const t0 = performance.now();
    const out = await d.completions.create(body as never, { headers });
    const ms = performance.now() - t0;
    expect(out.choices[0]!.finish_reason).toBe("length");
    expect(out.usage!.completion_tokens).toBe(20);
    expect(out.usage!.prompt_tokens_details?.cached_tokens).toBe(blocks * 16);
    expect(ms).toBeLessThan(10_000);
    const held = await (await fetch(`${prefill.url}/metrics`)).text();
    expect(held).toContain("sim_kv_held_blocks 0");
    const pulled = await (await fetch(`${decode.url}/metrics`)).text();
    expect(pulled).toContain(`sim_kv_pull_bytes_total ${blocks * BYTES_PER_BLOCK}`);
  });

  test("streaming chat: the decode leg streams to the client after the pull", async () => {
    const client = { model: "sim", messages: [{ role: "user", content: PROMPT }], max_tokens: 12, stream: true, stream_options: { include_usage: true }, ignore_eos: true };
    const { params, d, headers, body } = await twoLegs({ ...client }, "pd-2", true);
    expect(params).not.toBeNull();
    const stream = await d.chat.completions.create(body as never, { headers });
    let text = "";
    let cached = -1;
    for await (const c of stream as unknown as AsyncIterable<{ choices: { delta: { content?: string } }[]; usage?: { prompt_tokens_details?: { cached_tokens: number } } }>) {
      text += c.choices[0]?.delta.content ?? "";
      if (c.usage) cached = c.usage.prompt_tokens_details?.cached_tokens ?? -1;
    }
    expect(text.length).toBeGreaterThan(0);
    expect(cached).toBe((params!.remote_block_ids as number[][])[0]!.length * 16);
  });
});
