// Pieces the subprocess benches share (bench/frontend-overhead.ts, bench/tracing-overhead.ts,
// bench/worst-case-body.ts, bench/peer-tls.ts, bench/readme-figures.ts): wait for a child's listening
// line, pick a free port, and count a closed loop's completions.

/** Read the child's stderr (or stdout) until `re` matches and return its first group; keep draining after. */
export async function waitUrl(proc: ReturnType<typeof Bun.spawn>, re: RegExp, what: string, from: "stderr" | "stdout" = "stderr"): Promise<string> {
  const dec = new TextDecoder();
  let buf = "";
  const reader = (proc[from] as ReadableStream<Uint8Array>).getReader();
  const deadline = performance.now() + 30_000;
  while (performance.now() < deadline) {
    const r = await reader.read();
    if (r.done) break;
    buf += dec.decode(r.value);
    const m = re.exec(buf);
    if (m) {
      // Keep draining so the child never blocks on a full pipe.
      void (async () => {
        while (!(await reader.read()).done);
      })();
      return m[1]!;
    }
  }
  throw new Error(`${what} did not start:\n${buf}`);
}

/** A port free now on `hostname` (default: every interface), for a child to listen on. */
export async function freePort(hostname?: string): Promise<number> {
  const s = Bun.serve({ ...(hostname === undefined ? {} : { hostname }), port: 0, fetch: () => new Response() });
  const p = s.port!;
  await s.stop(true);
  return p;
}

/** Completions of `once()` by `concurrency` closed-loop clients in `ms`. */
export async function closedLoop(concurrency: number, ms: number, once: () => Promise<unknown>): Promise<number> {
  const end = performance.now() + ms;
  let done = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < end) {
        await once();
        done++;
      }
    }),
  );
  return done;
}
