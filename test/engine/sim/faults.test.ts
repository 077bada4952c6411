import { describe, expect, test } from "bun:test";
import { spawn } from "node:child_process";
import { resolve } from "node:path";
import { startSimEngine } from "../../../src/engine/sim/server.ts";
import { freePort } from "../../helpers/ports.ts";

const MAIN = resolve(import.meta.dir, "../../../src/engine/sim/main.ts");

const complete = (url: string, body: Record<string, unknown>, signal?: AbortSignal) =>
  fetch(`${url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ prompt: "hello", max_tokens: 3, ...body }), signal: signal ?? null });

describe("fault knobs", () => {
  test("--fail-after N: later requests get 500 with an error body", async () => {
    const e = await startSimEngine({ port: 0, failAfter: 2, timeScale: 100 });
    try {
      expect((await complete(e.url, {})).status).toBe(200);
      expect((await complete(e.url, {})).status).toBe(200);
      const r = await complete(e.url, {});
      expect(r.status).toBe(500);
      expect(((await r.json()) as { error: { code: number } }).error.code).toBe(500);
      expect(e.stats().requests).toBe(3);
    } finally {
      await e.stop();
    }
  });

  test("--hang-after N: later requests are accepted and never answered", async () => {
    const e = await startSimEngine({ port: 0, hangAfter: 1, timeScale: 100 });
    try {
      expect((await complete(e.url, {})).status).toBe(200);
      const t0 = performance.now();
      const err = await complete(e.url, { stream: true }, AbortSignal.timeout(300)).then(() => null, (x: unknown) => x);
      expect(err).toBeInstanceOf(Error);
      expect(performance.now() - t0).toBeGreaterThanOrEqual(290);
      // Health stays green: a hung engine is only detectable by request timeouts.
      expect((await fetch(`${e.url}/health`)).status).toBe(200);
    } finally {
      await e.stop();
    }
  });

  test("--crash-after N (in-process): request N+1's stream breaks after its first token, without [DONE]", async () => {
    const e = await startSimEngine({ port: 0, crashAfter: 1, timeScale: 100 });
    try {
      expect((await complete(e.url, {})).status).toBe(200);
      const r = await complete(e.url, { stream: true, max_tokens: 2000, ignore_eos: true });
      expect(r.status).toBe(200);
      let body = "";
      const err = await (async () => {
        const reader = r.body!.getReader();
        for (;;) {
          const { done, value } = await reader.read();
          if (done) return null;
          body += new TextDecoder().decode(value);
        }
      })().catch((x: unknown) => x);
      expect(body).toContain('"text_completion"');
      expect(body).not.toContain("[DONE]");
      expect(err === null || err instanceof Error).toBe(true);
      const h = await fetch(`${e.url}/health`).then((x) => x.status, () => "refused");
      expect(h === 503 || h === "refused").toBe(true);
    } finally {
      await e.stop();
    }
  });

  test("--startup-delay-ms: the port refuses connections while loading, then logs readiness", async () => {
    const port = await freePort();
    const lines: string[] = [];
    const starting = startSimEngine({ port, startupDelayMs: 400, log: (l) => lines.push(l) });
    await Bun.sleep(100);
    const early = await fetch(`http://127.0.0.1:${port}/health`).then((r) => r.status, (x: unknown) => String((x as { code?: string }).code ?? x));
    expect(early === "ConnectionRefused" || early === "ECONNREFUSED").toBe(true);
    expect(lines.some((l) => l.includes("Application startup complete."))).toBe(false);
    const e = await starting;
    try {
      expect((await fetch(`http://127.0.0.1:${port}/health`)).status).toBe(200);
      expect(lines.at(-1)).toBe("INFO:     Application startup complete.");
      expect(lines.some((l) => l.includes("GPU KV cache size: 395,200 tokens"))).toBe(true);
      expect(lines.some((l) => l.includes(`Starting vLLM API server 0 on http://127.0.0.1:${port}`))).toBe(true);
    } finally {
      await e.stop();
    }
  });
});

/** Run `bun main.ts args…` and collect its output; resolves on exit. */
function runMain(args: string[], onLine?: (line: string, child: ReturnType<typeof spawn>) => void) {
  const child = spawn(process.execPath, [MAIN, ...args], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  child.stdout!.on("data", (d: Buffer) => {
    for (const line of d.toString().split("\n")) if (line) onLine?.(line, child);
    out += d.toString();
  });
  child.stderr!.on("data", (d: Buffer) => void (err += d.toString()));
  // Never leave an engine behind if an assertion path hangs.
  const killer = setTimeout(() => child.kill("SIGKILL"), 10_000);
  child.on("exit", () => clearTimeout(killer));
  return new Promise<{ code: number | null; out: string; err: string }>((res) => child.on("exit", (code) => res({ code, out, err })));
}

describe("herd sim-engine command line", () => {
  test("an unknown flag or a bad value exits 2 with a message", async () => {
    const a = await runMain(["--bogus", "1"]);
    expect(a.code).toBe(2);
    expect(a.err).toContain("unknown flag --bogus");
    const b = await runMain(["--kv-blocks", "many"]);
    expect(b.code).toBe(2);
    expect(b.err).toContain("--kv-blocks: expected a number");
  });

  test("--port 0 prints the bound port; --crash-after exits mid-stream with code 70", async () => {
    let streamed = "";
    let streamEnded: Promise<void> = Promise.resolve();
    const run = runMain(["--port", "0", "--zero-delay", "--crash-after", "0", "--model", "m"], (line) => {
      const m = /Starting vLLM API server 0 on (http:\/\/\S+)/.exec(line);
      if (m === null) return;
      streamEnded = (async () => {
        const r = await complete(m[1]!, { stream: true, max_tokens: 30000, ignore_eos: true, model: "m" });
        const reader = r.body!.getReader();
        try {
          for (;;) {
            const { done, value } = await reader.read();
            if (done) break;
            streamed += new TextDecoder().decode(value);
          }
        } catch {
          // connection reset by the dying process
        }
      })();
    });
    const res = await run;
    await streamEnded;
    expect(res.out).toContain("Application startup complete.");
    expect(res.code).toBe(70);
    expect(streamed).toContain("data: {");
    expect(streamed).not.toContain("[DONE]");
  });
});
