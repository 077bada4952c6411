// herd's version: package.json's version plus the git commit the binary was built from.
// scripts/build.sh embeds the commit with `bun build --compile --define HERD_COMMIT='"<sha>"'`;
// when running from source the identifier is undefined and the commit reads "unknown".

import pkg from "../package.json" with { type: "json" };

declare const HERD_COMMIT: string | undefined;

export const VERSION: string = pkg.version;

export const COMMIT: string = (() => {
  try {
    return typeof HERD_COMMIT === "string" && HERD_COMMIT !== "" ? HERD_COMMIT : "unknown";
  } catch {
    return "unknown"; // belt and braces: a bundler that rewrites typeof oddly must not break `herd version`
  }
})();

/** `herd 0.1.0 (commit 1a2b3c4, bun 1.4.5)` */
export function versionLine(): string {
  return `herd ${VERSION} (commit ${COMMIT}, bun ${Bun.version})`;
}
