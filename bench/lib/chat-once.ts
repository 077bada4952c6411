// The frontend benches' one request (bench/frontend-overhead.ts, frontend-stalls.ts, frontend-ceiling.ts):
// the same small chat against herd, a bare proxy or the engine directly, so their rows compare alike.
import { readFileSync } from "node:fs";

export const MODEL = "bench-sim";

export const chatBody = (stream: boolean) =>
  JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hello there" }], max_tokens: 8, stream, ...(stream ? { stream_options: { include_usage: true } } : {}) });

/** One chat POST read whole; its latency in ms. A non-200, a stream without [DONE] or an answer without choices throws. */
export async function chatOnce(url: string, stream: boolean): Promise<number> {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: chatBody(stream) });
  const text = await res.text();
  if (res.status !== 200 || (stream ? !text.includes("[DONE]") : !text.includes('"choices"'))) throw new Error(`bad answer ${res.status} from ${url}: ${text.slice(0, 200)}`);
  return performance.now() - t0;
}

/** CPU seconds (user + system) of a process: /proc/PID/stat utime + stime in USER_HZ (100) ticks. */
export function cpuS(pid: number): number {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch {
    return NaN;
  }
}
