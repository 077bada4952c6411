// herd's version: package.json's version plus the git commit the binary was built from.
// scripts/build.sh embeds the commit with `bun build --compile --define HERD_COMMIT='"<sha>"'`.
// Run from a source checkout (no embedded commit), the commit is read from git the same way
// build.sh does (12 hex digits, "-dirty" when tracked files differ), so a bug report from a
// checkout names its commit too; "unknown" only when neither is available.

import { sourceCheckoutRoot } from "./config/host.ts";
import pkg from "../package.json" with { type: "json" };

declare const HERD_COMMIT: string | undefined;

export const VERSION: string = pkg.version;

/** The commit embedded at build time, or null in a source checkout. */
export const EMBEDDED_COMMIT: string | null = (() => {
  try {
    return typeof HERD_COMMIT === "string" && HERD_COMMIT !== "" ? HERD_COMMIT : null;
  } catch {
    return null; // belt and braces: a bundler that rewrites typeof oddly must not break `herd version`
  }
})();

/** The checkout herd runs from, or null inside a compiled binary. */
export const sourceRoot = sourceCheckoutRoot;

function git(args: string[], cwd: string): string | null {
  try {
    const r = Bun.spawnSync(["git", ...args], { cwd, stdout: "pipe", stderr: "ignore", env: { ...process.env, GIT_OPTIONAL_LOCKS: "0" } });
    return r.exitCode === 0 ? r.stdout.toString().trim() : null;
  } catch {
    return null; // no git on this host
  }
}

/** `git rev-parse --short=12 HEAD` (+ "-dirty") of a checkout, as scripts/build.sh computes it. */
export function checkoutCommit(root: string): string | null {
  const head = git(["rev-parse", "--short=12", "HEAD"], root);
  if (!head) return null;
  const dirty = git(["status", "--porcelain", "--untracked-files=no"], root);
  return dirty ? `${head}-dirty` : head;
}

let commitCache: string | undefined;

/** Embedded commit, else the checkout's, else "unknown". Computed once (it runs git). */
export function commit(): string {
  if (commitCache === undefined) {
    const root = EMBEDDED_COMMIT === null ? sourceRoot() : null;
    commitCache = EMBEDDED_COMMIT ?? (root ? checkoutCommit(root) : null) ?? "unknown";
  }
  return commitCache;
}

/** `herd 0.1.0 (commit 1a2b3c4d5e6f, bun 1.4.5)`; from a checkout: `… (commit 1a2b…, source checkout /path, bun …)` */
export function versionLine(): string {
  const from = EMBEDDED_COMMIT === null && sourceRoot() !== null ? `, source checkout ${sourceRoot()}` : "";
  return `herd ${VERSION} (commit ${commit()}${from}, bun ${Bun.version})`;
}
