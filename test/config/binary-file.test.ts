// Issue 10 item 7: `herd config check` on a binary file says so in one line instead of echoing
// ≈10 KB of YAML syntax errors; a text file that is badly broken shows its first errors only.
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { loadConfigFile } from "../../src/config/load.ts";

const dir = mkdtempSync(join(tmpdir(), "herd-cfg-bin-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const ROOT = resolve(import.meta.dir, "../..");

test("a binary file is one short finding, and config check prints one short message", async () => {
  const bin = join(dir, "herd.yaml");
  // An ELF-like header then bytes of every value: what `herd config check /usr/bin/x` reads.
  writeFileSync(bin, Buffer.concat([Buffer.from("\x7fELF\x02\x01\x01\x00"), Buffer.from(Array.from({ length: 12_000 }, (_, i) => (i * 37) % 256))]));
  const r = await loadConfigFile(bin);
  expect(r.config).toBeUndefined();
  expect(r.findings).toHaveLength(1);
  expect(r.findings[0]!.message).toContain("not a YAML text file: NUL byte at offset 7");
  const p = Bun.spawnSync([process.execPath, join(ROOT, "src/cli.ts"), "config", "check", bin], { stdout: "pipe", stderr: "pipe" });
  expect(p.exitCode).toBe(1);
  const err = p.stderr.toString();
  expect(err.length).toBeLessThan(400);
  expect(err).toContain("not a YAML text file");
  expect(p.stdout.toString()).toBe("");
  // Invalid UTF-8 without NUL bytes is binary too.
  writeFileSync(bin, Buffer.from([0x66, 0x72, 0xff, 0xfe, 0x3a, 0x20, 0x31]));
  expect((await loadConfigFile(bin)).findings[0]!.message).toContain("invalid UTF-8");
});

test("a text file that is not YAML shows its first 10 syntax errors and a count of the rest", async () => {
  const f = join(dir, "broken.yaml");
  writeFileSync(f, Array.from({ length: 200 }, (_, i) => `k${i}: [\n  x: {`).join("\n"));
  const r = await loadConfigFile(f);
  expect(r.findings.length).toBeLessThanOrEqual(11);
  expect(r.findings.every((x) => x.severity === "error")).toBe(true);
});
