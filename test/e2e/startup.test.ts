// Startup failures end the process with exit 1 and one clear line, before any engine starts.
import { expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "../..");

test("a taken listen port: exit 1 with the address in the message, no engine started", async () => {
  const dir = mkdtempSync(join(tmpdir(), "herd-startup-"));
  const taken = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("busy") });
  try {
    const cfg = join(dir, "herd.yaml");
    writeFileSync(
      cfg,
      `node: { name: st, data_dir: ${JSON.stringify(join(dir, "data"))} }
models: [{ name: st-sim }]
engines: [{ kind: sim, model: st-sim, count: 1 }]
`,
    );
    const herd = Bun.spawn([process.execPath, "src/cli.ts", "run", "--config", cfg, "--listen", `127.0.0.1:${taken.port}`], {
      cwd: ROOT,
      stdout: "pipe",
      stderr: "pipe",
    });
    const code = await Promise.race([herd.exited, Bun.sleep(15_000).then(() => "timeout")]);
    const err = await new Response(herd.stderr as ReadableStream<Uint8Array>).text();
    expect(code).toBe(1);
    expect(err).toContain(`cannot listen on 127.0.0.1:${taken.port}`);
    expect(err).not.toContain("engine started");
  } finally {
    await taken.stop(true);
    rmSync(dir, { recursive: true, force: true });
  }
}, 20_000);
