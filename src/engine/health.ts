// The health probe: GET <url><path>, healthy only on 200 within the timeout. Refused connections
// (vLLM and trtllm bind before loading), 503 (SGLang warming up or any engine draining) and
// timeouts (a SIGSTOPped or wedged engine still accepts TCP but never answers) all count as down.
import { errorMessage } from "../core/errors.ts";
import type { ProbeResult } from "./runner.ts";

/** `healthy` is the engine driver's rule (drivers/<kind>.ts `health`); default: 200 only. */
export type Probe = (url: string, timeoutMs: number, healthy?: (status: number) => boolean) => Promise<ProbeResult>;

export const httpProbe: Probe = async (url, timeoutMs, healthy = (s) => s === 200) => {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs), redirect: "manual" });
    // Drain the body so the pooled connection can be reused.
    await res.arrayBuffer().catch(() => undefined);
    return healthy(res.status) ? { ok: true } : { ok: false, detail: `HTTP ${res.status}` };
  } catch (e) {
    const name = e instanceof Error ? e.name : "";
    return { ok: false, detail: name === "TimeoutError" || name === "AbortError" ? `no answer in ${timeoutMs} ms` : errorMessage(e) };
  }
};
