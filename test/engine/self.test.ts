// How kind `sim` re-invokes herd: [bun, /abs/src/cli.ts] from source, [binary] when compiled.
import { describe, expect, test } from "bun:test";
import { existsSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { isEmbeddedPath, selfCommand } from "../../src/engine/self.ts";
import { tempDir } from "../fixtures/engines/config.ts";

const SELF_TS = resolve(import.meta.dir, "../../src/engine/self.ts");

describe("self command", () => {
  test("embedded paths of compiled binaries are recognised, ordinary ones are not", () => {
    expect(isEmbeddedPath("/$bunfs/root/herd")).toBe(true);
    expect(isEmbeddedPath("file:///$bunfs/root/herd")).toBe(true);
    expect(isEmbeddedPath("B:\\~BUN\\root\\herd.exe")).toBe(true);
    expect(isEmbeddedPath("B:/~BUN/root")).toBe(true);
    expect(isEmbeddedPath("/work/main/src/engine")).toBe(false);
    expect(isEmbeddedPath("/home/u/$bunfs/x")).toBe(false);
    expect(selfCommand("/$bunfs/root", "/usr/local/bin/herd")).toEqual(["/usr/local/bin/herd"]);
    expect(selfCommand("/opt/herd/src/engine", "/usr/bin/bun")).toEqual(["/usr/bin/bun", "/opt/herd/src/cli.ts"]);
  });

  test("from source: the bun runtime plus the absolute path of src/cli.ts", () => {
    const cmd = selfCommand();
    expect(cmd).toEqual([process.execPath, resolve(import.meta.dir, "../../src/cli.ts")]);
    expect(existsSync(cmd[1]!)).toBe(true);
  });

  test("inside a bun build --compile binary: the binary alone", async () => {
    const dir = tempDir("herd-self-");
    try {
      const entry = join(dir, "entry.ts");
      writeFileSync(entry, `import { selfCommand } from ${JSON.stringify(SELF_TS)};\nconsole.log(JSON.stringify(selfCommand()));\n`);
      const out = join(dir, "herd-self");
      const build = Bun.spawnSync([process.execPath, "build", "--compile", entry, "--outfile", out], { stdout: "pipe", stderr: "pipe" });
      expect(build.exitCode, build.stderr.toString()).toBe(0);
      const run = Bun.spawnSync([out], { stdout: "pipe", stderr: "pipe" });
      expect(JSON.parse(run.stdout.toString())).toEqual([out]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000); // compiling a binary takes seconds on a loaded 2-core box
});
