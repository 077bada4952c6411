// The health probe: GET <url><path>, healthy only on 200 within the timeout. Refused connections
// (vLLM and trtllm bind before loading), 503 (SGLang warming up or any engine draining) and
// timeouts (a SIGSTOPped or wedged engine still accepts TCP but never answers) all count as down.
import { errorMessage } from "../core/errors.ts";
import type { ProbeResult } from "./runner.ts";

export type Probe = (url: string, timeoutMs: number) => Promise<ProbeResult>;

export const httpProbe: Probe = async (url, timeoutMs) => {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs), redirect: "manual" });
    // Drain the body so the pooled connection can be reused.
    await res.arrayBuffer().catch(() => undefined);
    return res.status === 200 ? { ok: true } : { ok: false, detail: `HTTP ${res.status}` };
  } catch (e) {
    const name = e instanceof Error ? e.name : "";
    return { ok: false, detail: name === "TimeoutError" || name === "AbortError" ? `no answer in ${timeoutMs} ms` : errorMessage(e) };
  }
};
