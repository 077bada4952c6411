// How to re-invoke this herd executable (engine kind `sim` runs `herd sim-engine …`).
// From source, process.execPath is the bun runtime and the CLI is a file: [bun, /abs/src/cli.ts].
// In a `bun build --compile` binary, execPath is the binary itself and every bundled module lives
// in Bun's virtual filesystem (`/$bunfs/root/…` on POSIX, `B:\~BUN\root\…` on Windows), so the
// binary alone is the command. We test the location of this very module, not Bun.main, because
// under `bun test` the entry point is a test file while this module is still on disk.
import { resolve } from "node:path";

/** True when a module path or URL lies inside a compiled binary's embedded filesystem. */
export function isEmbeddedPath(p: string): boolean {
  const path = p.startsWith("file://") ? decodeURIComponent(p.slice("file://".length)) : p;
  return path.startsWith("/$bunfs/") || /^[A-Za-z]:[\\/]~BUN[\\/]/.test(path);
}

/** argv prefix that runs the herd CLI; append the subcommand and its flags. */
export function selfCommand(
  moduleDir: string = import.meta.dir,
  execPath: string = process.execPath,
): string[] {
  if (isEmbeddedPath(moduleDir)) return [execPath];
  return [execPath, resolve(moduleDir, "..", "cli.ts")];
}
