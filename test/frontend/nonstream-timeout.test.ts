// Non-streaming requests are bounded: headers within first_token_timeout_ms + max_tokens × 100 ms,
// then the body within idle_timeout_ms; a timeout is a 504 `upstream_timeout`, not retried.
import { describe, expect, test } from "bun:test";
import { NON_STREAM_DEFAULT_MAX_TOKENS, NON_STREAM_MAX_COUNTED_TOKENS, NON_STREAM_MS_PER_TOKEN, nonStreamingHeadersBoundMs, requestedMaxTokens } from "../../src/request/bounds.ts";
import { chatBody, chatCompletion, post, startHerd, startUpstream, trackForCleanup, until, type Herd } from "./harness.ts";

const track = trackForCleanup();

/** Resolves when the request is aborted, or after ms (so a stuck test cannot hang the suite). */
const hang = (req: Request, ms = 5000) =>
  new Promise<void>((resolve) => {
    const t = setTimeout(resolve, ms);
    req.signal.addEventListener("abort", () => {
      clearTimeout(t);
      resolve();
    });
  });

async function expectSettled(h: Herd): Promise<void> {
  await until(() => h.frontend.inFlightCount === 0, 2000, "frontend in-flight back to 0");
  for (const w of h.registry.list()) expect(w.load.in_flight).toBe(0);
  expect(h.frontend.admission.size).toBe(0);
}

describe("non-streaming bound (pure)", () => {
  test("first-token allowance plus a per-token allowance, capped", () => {
    expect(nonStreamingHeadersBoundMs(60_000, 256)).toBe(60_000 + 256 * NON_STREAM_MS_PER_TOKEN);
    expect(nonStreamingHeadersBoundMs(60_000, null)).toBe(60_000 + NON_STREAM_DEFAULT_MAX_TOKENS * NON_STREAM_MS_PER_TOKEN);
    expect(nonStreamingHeadersBoundMs(1_000, 10_000_000)).toBe(1_000 + NON_STREAM_MAX_COUNTED_TOKENS * NON_STREAM_MS_PER_TOKEN);
  });

  test("max_completion_tokens wins over max_tokens; absent or invalid is null", () => {
    expect(requestedMaxTokens({ max_tokens: 7 })).toBe(7);
    expect(requestedMaxTokens({ max_tokens: 7, max_completion_tokens: 9 })).toBe(9);
    expect(requestedMaxTokens({})).toBeNull();
    expect(requestedMaxTokens({ max_tokens: null })).toBeNull();
    expect(requestedMaxTokens({ max_tokens: "5" })).toBeNull();
  });
});

describe("non-streaming bound (proxy)", () => {
  test("an upstream that never answers gets 504 upstream_timeout, no retry, lease released, upstream aborted", async () => {
    const up = track(startUpstream(async (req) => {
      await hang(req);
      return Response.json(chatCompletion("too late"));
    }));
    // Two workers: a timeout must not be retried on the other one (as for streams).
    const h = track(await startHerd({ workers: [{ id: "a", url: up.url }, { id: "b", url: up.url }], frontend: { first_token_timeout_ms: 150 } }));
    const t0 = performance.now();
    // bound = 150 + 1 × 100 ms
    const res = await post(`${h.url}/v1/chat/completions`, chatBody({ max_tokens: 1 }));
    const elapsedMs = performance.now() - t0;
    expect(res.status).toBe(504);
    expect(res.headers.get("content-type")).toContain("application/json");
    const body = (await res.json()) as any;
    expect(body.error.code).toBe("upstream_timeout");
    expect(body.error.message).toContain("250 ms");
    expect(elapsedMs).toBeGreaterThanOrEqual(240);
    expect(elapsedMs).toBeLessThan(2000);
    await until(() => up.aborted > 0, 2000, "upstream aborted");
    expect(up.received.length).toBe(1);
    await expectSettled(h);
    expect(await h.metrics.render()).toMatch(/herd_upstream_errors_total\{[^}]*kind="first_token_timeout"[^}]*\} 1/);
  });

  test("an upstream that stalls mid-body gets 504 after idle_timeout_ms", async () => {
    const full = JSON.stringify(chatCompletion("hello"));
    const up = track(startUpstream((req) =>
      new Response(
        new ReadableStream<Uint8Array>({
          async start(ctrl) {
            ctrl.enqueue(new TextEncoder().encode(full.slice(0, 20)));
            await hang(req);
            ctrl.close();
          },
        }),
        { headers: { "content-type": "application/json", "content-length": String(full.length) } },
      ),
    ));
    const h = track(await startHerd({ workers: [{ id: "a", url: up.url }], frontend: { first_token_timeout_ms: 5_000, idle_timeout_ms: 150 } }));
    const t0 = performance.now();
    const res = await post(`${h.url}/v1/chat/completions`, chatBody({ max_tokens: 4 }));
    expect(res.status).toBe(504);
    expect(((await res.json()) as any).error.code).toBe("upstream_timeout");
    expect(performance.now() - t0).toBeLessThan(2000);
    await until(() => up.aborted > 0, 2000, "upstream aborted");
    await expectSettled(h);
    expect(await h.metrics.render()).toMatch(/herd_upstream_errors_total\{[^}]*kind="idle_timeout"[^}]*\} 1/);
  });

  test("a slow answer within the bound succeeds (the bound grows with max_tokens)", async () => {
    const up = track(startUpstream(async () => {
      await Bun.sleep(400);
      return Response.json(chatCompletion("slow but fine"));
    }));
    // 150 ms alone would abort it; 150 + 10 × 100 ms = 1150 ms does not.
    const h = track(await startHerd({ workers: [{ id: "a", url: up.url }], frontend: { first_token_timeout_ms: 150, idle_timeout_ms: 150 } }));
    const res = await post(`${h.url}/v1/chat/completions`, chatBody({ max_tokens: 10 }));
    expect(res.status).toBe(200);
    expect(((await res.json()) as any).choices[0].message.content).toBe("slow but fine");
    expect(up.aborted).toBe(0);
    await expectSettled(h);
  });

  test("a body arriving in chunks with gaps under idle_timeout_ms succeeds even when it takes longer in total", async () => {
    const full = JSON.stringify(chatCompletion("paced"));
    const parts = [full.slice(0, 10), full.slice(10, 30), full.slice(30)];
    const up = track(startUpstream(() =>
      new Response(
        new ReadableStream<Uint8Array>({
          async pull(ctrl) {
            const p = parts.shift();
            if (p === undefined) return ctrl.close();
            await Bun.sleep(80);
            ctrl.enqueue(new TextEncoder().encode(p));
          },
        }),
        { headers: { "content-type": "application/json" } },
      ),
    ));
    // 3 gaps of 80 ms (240 ms in all) against a 150 ms idle bound: re-armed per chunk, not total.
    const h = track(await startHerd({ workers: [{ id: "a", url: up.url }], frontend: { first_token_timeout_ms: 5_000, idle_timeout_ms: 150 } }));
    const res = await post(`${h.url}/v1/chat/completions`, chatBody({ max_tokens: 4 }));
    expect(res.status).toBe(200);
    expect(((await res.json()) as any).choices[0].message.content).toBe("paced");
    await expectSettled(h);
  });

  test("an answer over 1 MiB is piped past the buffer intact; a stall after that cuts the body and releases the lease", async () => {
    const chunk = new Uint8Array(256 * 1024).fill(0x78); // 'x'
    const make = (stallAfter: number | null) => (req: Request) => {
      let sent = 0;
      return new Response(
        new ReadableStream<Uint8Array>({
          async pull(ctrl) {
            if (stallAfter !== null && sent === stallAfter) {
              await hang(req);
              return ctrl.close();
            }
            if (sent === 6) return ctrl.close();
            sent++;
            ctrl.enqueue(chunk);
          },
        }),
        { headers: { "content-type": "application/json" } },
      );
    };
    const ok = track(startUpstream(make(null)));
    const h1 = track(await startHerd({ workers: [{ id: "a", url: ok.url }], frontend: { idle_timeout_ms: 150 } }));
    const r1 = await post(`${h1.url}/v1/chat/completions`, chatBody());
    expect(r1.status).toBe(200);
    expect((await r1.arrayBuffer()).byteLength).toBe(6 * chunk.byteLength);
    await expectSettled(h1);

    const stalls = track(startUpstream(make(5)));
    const h2 = track(await startHerd({ workers: [{ id: "a", url: stalls.url }], frontend: { idle_timeout_ms: 150 } }));
    const r2 = await post(`${h2.url}/v1/chat/completions`, chatBody());
    expect(r2.status).toBe(200); // committed once the buffer passed 1 MiB
    let cut = false;
    try {
      await r2.arrayBuffer();
    } catch {
      cut = true;
    }
    expect(cut).toBe(true);
    await until(() => stalls.aborted > 0, 2000, "upstream aborted");
    await expectSettled(h2);
  });
});
