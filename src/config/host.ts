// Host-dependent defaults (node name, data dir). The choice is a pure function of injected facts so
// tests can pin it; `hostDefaults()` gathers the facts from this machine.

import { accessSync, constants } from "node:fs";
import { hostname, homedir } from "node:os";
import { dirname, join, resolve } from "node:path";
import type { DefaultsEnv } from "./spec.ts";

export interface HostFacts {
  uid: number;
  env: Record<string, string | undefined>;
  home: string;
  cwd: string;
  canWrite: (path: string) => boolean;
  /** herd runs from a source checkout (`npm start`, `bun src/cli.ts`), not the installed binary. */
  sourceCheckout?: boolean;
}

/**
 * The checkout herd runs from (the directory holding src/), or null inside a compiled binary, whose
 * modules live under Bun's virtual /$bunfs (B:/~BUN on Windows).
 */
export function sourceCheckoutRoot(): string | null {
  const dir = import.meta.dir;
  return dir.startsWith("/$bunfs") || dir.includes("~BUN") ? null : dirname(dirname(dir));
}

/**
 * Where herd keeps logs and state when node.data_dir is not set, first match wins:
 * 1. `$STATE_DIRECTORY` — systemd sets it from `StateDirectory=herd` (usually /var/lib/herd), root or not;
 * 2. `/var/lib/herd` when running as root and it (or /var/lib, to create it) is writable — the FHS place
 *    for a system service. Not from a source checkout: /var/lib/herd is the installed service's state
 *    (engines.json, orphan sweep, logs), and a checkout run must not touch it (root or not, it uses 3.);
 * 3. `$XDG_DATA_HOME/herd`, else `~/.local/share/herd` — a user running herd by hand must not need root;
 * 4. `./.herd` when there is no home directory at all (containers with HOME unset).
 */
export function chooseDataDir(f: HostFacts): string {
  const state = f.env.STATE_DIRECTORY?.split(":")[0];
  if (state) return state;
  if (f.uid === 0 && !f.sourceCheckout && (f.canWrite("/var/lib/herd") || f.canWrite("/var/lib"))) return "/var/lib/herd";
  if (f.env.XDG_DATA_HOME) return join(f.env.XDG_DATA_HOME, "herd");
  if (f.home) return join(f.home, ".local", "share", "herd");
  return resolve(f.cwd, ".herd");
}

function canWrite(path: string): boolean {
  try {
    accessSync(path, constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

let cached: DefaultsEnv | null = null;

export function hostDefaults(): DefaultsEnv {
  cached ??= {
    hostname: hostname() || "localhost",
    dataDir: chooseDataDir({
      uid: process.getuid?.() ?? -1,
      env: process.env,
      home: process.env.HOME ?? safeHome(),
      cwd: process.cwd(),
      canWrite,
      sourceCheckout: sourceCheckoutRoot() !== null,
    }),
  };
  return cached;
}

function safeHome(): string {
  try {
    return homedir();
  } catch {
    return "";
  }
}
