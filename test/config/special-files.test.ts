// Issue 22: `herd config check /dev/zero` read until ENOMEM and a FIFO blocked forever (stat's size
// is 0 for both). Only regular files are read, opened non-blocking, and at most the size bound.
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { loadConfigFile } from "../../src/config/load.ts";

const dir = mkdtempSync(join(tmpdir(), "herd-cfg-special-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const ROOT = resolve(import.meta.dir, "../..");

test("/dev/zero, /dev/null and a FIFO are one finding each, without reading (or hanging)", async () => {
  const fifo = join(dir, "herd.yaml");
  expect(Bun.spawnSync(["mkfifo", fifo]).exitCode).toBe(0);
  for (const [path, kind] of [["/dev/zero", "a character device"], ["/dev/null", "a character device"], [fifo, "a FIFO"], [dir, "is a directory"]] as const) {
    const r = await loadConfigFile(path);
    expect(r.config).toBeUndefined();
    expect(r.findings).toHaveLength(1);
    expect(r.findings[0]!.message).toContain(kind);
  }
  // the real command too, bounded in time: a blocking read would hit the timeout
  const p = Bun.spawnSync([process.execPath, join(ROOT, "src/cli.ts"), "config", "check", fifo], { stdout: "pipe", stderr: "pipe", timeout: 15_000 });
  expect(p.exitCode).toBe(1);
  expect(p.stderr.toString()).toContain("cannot read config file: a FIFO; expected a regular file");
});
