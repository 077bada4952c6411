// One streaming request against an OpenAI-compatible endpoint, timed from its SSE stream. This is the
// load generator's hot path, so it stays lean: Bun's pooled keep-alive fetch, one TextDecoder, a
// scan for "\n\n" event boundaries, and one timestamp per network read (events that arrive in the same
// read did arrive together).

import type { RequestRecord } from "../workload/stats.ts";
import type { BenchRequest } from "../workload/workloads.ts";

export interface Target {
  /** Base URL, e.g. http://127.0.0.1:8080 (a trailing /v1 is accepted). */
  url: string;
  model: string;
  apiKey: string | null;
  /** Send ignore_eos (vLLM/SGLang extension) so outputs run to max_tokens. */
  ignoreEos: boolean;
  timeout_s: number;
  /** Header carrying the request's session id (herd's session.header, default x-session-id); null = none. */
  sessionHeader?: string | null;
}

export interface Endpoints {
  chat: string;
  completions: string;
  headers: Record<string, string>;
}

export function endpoints(t: Target): Endpoints {
  const base = t.url.replace(/\/+$/, "").replace(/\/v1$/, "");
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (t.apiKey) headers.authorization = `Bearer ${t.apiKey}`;
  return { chat: `${base}/v1/chat/completions`, completions: `${base}/v1/completions`, headers };
}

export function requestBody(t: Target, r: BenchRequest): string {
  const body: Record<string, unknown> = { model: t.model };
  if (r.messages !== undefined) body.messages = r.messages;
  else body.prompt = r.prompt ?? "";
  body.max_tokens = r.max_tokens;
  body.stream = true;
  body.stream_options = { include_usage: true };
  if (t.ignoreEos) body.ignore_eos = true;
  return JSON.stringify(body);
}

interface Chunk {
  choices?: { delta?: { content?: string | null; reasoning_content?: string | null; reasoning?: string | null }; text?: string | null }[];
  usage?: { prompt_tokens?: number; completion_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } | null } | null;
  error?: unknown;
}

/** Send `r`, timing it against `t0Ms` (performance.now() at the start of the run). Never throws. */
export async function sendOne(t: Target, ep: Endpoints, r: BenchRequest, index: number, t0Ms: number): Promise<RequestRecord> {
  const startMs = performance.now();
  const rec: RequestRecord = {
    index, session: r.session, at_s: r.at_s, start_s: (startMs - t0Ms) / 1000,
    ttft_s: null, itl_s: [], e2e_s: null, prompt_tokens: null, completion_tokens: null, cached_tokens: null, error: null,
  };
  const signal = t.timeout_s > 0 ? AbortSignal.timeout(t.timeout_s * 1000) : new AbortController().signal;
  let res: Response;
  try {
    const headers = t.sessionHeader ? { ...ep.headers, [t.sessionHeader]: r.session } : ep.headers;
    res = await fetch(r.messages !== undefined ? ep.chat : ep.completions, { method: "POST", headers, body: requestBody(t, r), signal });
  } catch (e) {
    rec.error = signal.aborted ? "timeout" : "connect";
    return rec;
  }
  if (res.status !== 200 || res.body === null) {
    rec.error = `http_${res.status}`;
    try {
      await res.arrayBuffer();
    } catch {
      // the body is only drained so the connection can be reused
    }
    return rec;
  }
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  let lastTokenMs = -1;
  let done = false;
  let endMs = 0;
  try {
    for (;;) {
      const { value, done: eof } = await reader.read();
      if (eof) break;
      const nowMs = performance.now();
      buf += dec.decode(value, { stream: true });
      if (buf.includes("\r")) buf = buf.replaceAll("\r\n", "\n");
      let cut: number;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const event = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        if (done) continue;
        const outcome = onEvent(event, nowMs);
        if (outcome === null) continue;
        if (outcome !== "done") rec.error = outcome;
        done = true;
        endMs = nowMs;
      }
      // After [DONE], keep reading to the end of the body so the connection goes back to the pool.
    }
  } catch {
    rec.error = signal.aborted ? "timeout" : "stream_broken";
  } finally {
    if (!done) void reader.cancel().catch(() => {});
  }
  rec.e2e_s = ((done ? endMs : performance.now()) - startMs) / 1000;
  if (rec.error === null && !done) rec.error = "stream_truncated";
  if (rec.error === null && rec.ttft_s === null) rec.error = "empty_response";
  // Without a usage chunk, count the chunks with text (one token each on vLLM; a lower bound elsewhere).
  if (rec.completion_tokens === null && rec.ttft_s !== null) rec.completion_tokens = rec.itl_s.length + 1;
  return rec;

  // One SSE event → "done" at [DONE], an error kind, or null to go on.
  function onEvent(event: string, nowMs: number): string | null {
    for (const line of event.split("\n")) {
      if (!line.startsWith("data:")) continue;
      const payload = line.charCodeAt(5) === 32 ? line.slice(6) : line.slice(5);
      if (payload === "[DONE]") return "done";
      let c: Chunk;
      try {
        c = JSON.parse(payload) as Chunk;
      } catch {
        return "bad_event";
      }
      if (c.error !== undefined && c.error !== null) return "stream_error";
      const ch = c.choices?.[0];
      // Reasoning models stream their thinking first (reasoning_content, or reasoning in newer vLLM): it is output too.
      const d = ch?.delta;
      const text = ch === undefined ? "" : ch.text || d?.content || d?.reasoning_content || d?.reasoning || "";
      if (text !== "") {
        if (lastTokenMs < 0) rec.ttft_s = (nowMs - startMs) / 1000;
        else rec.itl_s.push((nowMs - lastTokenMs) / 1000);
        lastTokenMs = nowMs;
      }
      const u = c.usage;
      if (u !== undefined && u !== null) {
        rec.prompt_tokens = u.prompt_tokens ?? null;
        rec.completion_tokens = u.completion_tokens ?? null;
        const cached = u.prompt_tokens_details?.cached_tokens;
        rec.cached_tokens = typeof cached === "number" ? cached : null;
      }
    }
    return null;
  }
}
