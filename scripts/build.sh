#!/bin/sh
# Build the single herd binary and the release tarballs.
#
#   scripts/build.sh [--arch host|x64|arm64|all] [--out DIR]
#
# Output (DIR defaults to dist/; the directory is a complete release: upload its files as they are):
#   DIR/linux-<arch>/herd + herd.sha256      the binary per architecture
#   DIR/herd + herd.sha256                   a copy of this host's binary (what `npm run build` users run)
#   DIR/herd-<version>-linux-<arch>.tar.gz   binary, config/herd.example.yaml, systemd/herd.service,
#                                            LICENSE, README.md under herd-<version>-linux-<arch>/
#   DIR/herd-<version>-linux-<arch>.tar.gz.sha256
#   DIR/VERSION                              the version; scripts/install.sh reads it to find "latest"
#
# The version is package.json's (src/version.ts bundles the same file); the git commit is embedded
# with --define HERD_COMMIT (12 hex digits, "-dirty" when tracked files differ from the commit).
#   DIR/install.sh                           the installer, so the release directory serves `curl | sh`
#
# Reproducible: the same commit and Bun version give byte-identical binaries and tarballs. The
# compile embeds no time stamp or build path (the output is always named `herd`, since the name is
# embedded); tarball entries get fixed modes, owner 0:0, name order and mtime SOURCE_DATE_EPOCH
# (default: the commit time), and gzip stores no name or time.
#
# Environment: BUN (default ./node_modules/.bin/bun), SOURCE_DATE_EPOCH, HERD_GZIP_LEVEL (default 6;
# 9 is 2.5x slower for <1% smaller), HERD_BUILD_CACHE (cross-compile runtimes, default
# node_modules/.cache/herd-build).
set -eu

die() { echo "build.sh: error: $*" >&2; exit 1; }
note() { echo "build.sh: $*" >&2; }

usage() { # the header comment above
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"
}

ARCH_SEL=all
OUT=dist
while [ $# -gt 0 ]; do
  case $1 in
    --arch) [ $# -ge 2 ] || die "--arch needs a value"; ARCH_SEL=$2; shift 2 ;;
    --arch=*) ARCH_SEL=${1#*=}; shift ;;
    --out) [ $# -ge 2 ] || die "--out needs a value"; OUT=$2; shift 2 ;;
    --out=*) OUT=${1#*=}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

BUN=${BUN:-./node_modules/.bin/bun}
if [ ! -x "$BUN" ]; then
  BUN=$(command -v bun 2>/dev/null) || die "bun not found: run 'npm install' first (or set BUN)"
fi
BUN_VERSION=$("$BUN" --version)

for f in src/cli.ts config/herd.example.yaml systemd/herd.service LICENSE README.md scripts/install.sh; do
  [ -f "$f" ] || die "$f is missing"
done
command -v sha256sum >/dev/null 2>&1 || die "sha256sum not found (coreutils)"
tar --version 2>/dev/null | grep -q 'GNU tar' || die "GNU tar is needed for a reproducible tarball (--sort=name)"

VERSION=$("$BUN" -e 'process.stdout.write(JSON.parse(require("fs").readFileSync("package.json", "utf8")).version)')
case $VERSION in
  ''|*[!0-9A-Za-z.+-]*) die "bad version '$VERSION' in package.json (letters, digits, . + - only)" ;;
esac

if git rev-parse --verify -q HEAD >/dev/null 2>&1; then
  COMMIT=$(git rev-parse --short=12 HEAD)
  # Tracked files changed since the commit: the binary is not what the commit says.
  if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then COMMIT="$COMMIT-dirty"; fi
  : "${SOURCE_DATE_EPOCH:=$(git log -1 --format=%ct HEAD)}"
else
  COMMIT=unknown
  : "${SOURCE_DATE_EPOCH:=0}"
  note "not a git checkout: commit 'unknown', SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH"
fi
case $SOURCE_DATE_EPOCH in ''|*[!0-9]*) die "SOURCE_DATE_EPOCH must be seconds since 1970" ;; esac
export SOURCE_DATE_EPOCH
GZIP_LEVEL=${HERD_GZIP_LEVEL:-6}
case $GZIP_LEVEL in [1-9]) ;; *) die "HERD_GZIP_LEVEL must be 1-9" ;; esac

case $(uname -m) in
  x86_64|amd64) HOST_ARCH=x64 ;;
  aarch64|arm64) HOST_ARCH=arm64 ;;
  *) HOST_ARCH=unsupported ;;
esac
case $ARCH_SEL in
  all) ARCHES="x64 arm64" ;;
  host) [ "$HOST_ARCH" != unsupported ] || die "this host ($(uname -m)) is not a herd target"; ARCHES=$HOST_ARCH ;;
  x64|arm64) ARCHES=$ARCH_SEL ;;
  *) die "--arch must be host, x64, arm64 or all" ;;
esac

TMP=$(mktemp -d "${TMPDIR:-/tmp}/herd-build.XXXXXX")
trap 'rm -rf "$TMP"' EXIT INT TERM

CACHE=${HERD_BUILD_CACHE:-$ROOT/node_modules/.cache/herd-build}
WORKER_ENTRIES="src/preprocess/worker.ts src/tier/tier-worker.ts src/pd/nixl-worker.ts src/kv/ingest-thread.ts"

# A cross-compile needs the Bun runtime of the target, the same version as ours. bun would download
# it from GitHub; we take it from the npm registry (the one network this project needs anyway) and
# keep it in CACHE. Prints the path, or fails with a reason.
target_runtime() {
  case $1 in x64) pkg=bun-linux-x64 ;; arm64) pkg=bun-linux-aarch64 ;; esac
  rt="$CACHE/$pkg-$BUN_VERSION/bun"
  if [ ! -x "$rt" ]; then
    command -v npm >/dev/null 2>&1 || { note "npm not found"; return 1; }
    mkdir -p "$TMP/rt-$1"
    if ! (cd "$TMP/rt-$1" && npm pack "@oven/$pkg@$BUN_VERSION" >"$TMP/npm.err" 2>&1); then
      note "npm pack @oven/$pkg@$BUN_VERSION failed: $(grep -i -m 1 'error' "$TMP/npm.err" || tail -n 1 "$TMP/npm.err")"
      return 1
    fi
    tar -xzf "$TMP/rt-$1"/*.tgz -C "$TMP/rt-$1" package/bin/bun || return 1
    mkdir -p "$(dirname "$rt")"
    mv "$TMP/rt-$1/package/bin/bun" "$rt.part" && chmod 0755 "$rt.part" && mv "$rt.part" "$rt"
  fi
  echo "$rt"
}

# --minify shrinks the bundle; --keep-names keeps class/function names (error names, logs) intact.
# --sourcemap: in a compiled binary every mode embeds the map (zstd), so stack traces name
# src/*.ts lines; `linked` also writes *.map files beside it, which we delete (they are inside).
# No --bytecode: measured here it cut `herd version` from ~450 to ~280 ms (+5 MB), but two builds
# of the same tree were no longer byte-identical, and reproducibility matters more for a release.
# dotenv/bunfig autoload are off: a daemon must not change behaviour because of a .env or
# bunfig.toml in whatever directory it was started from.
compile() {
  arch=$1 dir=$2
  set -- --compile --minify --keep-names --sourcemap=linked \
    --no-compile-autoload-dotenv --no-compile-autoload-bunfig \
    --define "HERD_COMMIT=\"$COMMIT\""
  if [ "$arch" != "$HOST_ARCH" ]; then
    rt=$(target_runtime "$arch") || return 1
    set -- "$@" "--target=bun-linux-$arch" "--compile-executable-path=$rt"
  fi
  # The first entry point is what the binary runs, so src/cli.ts comes first. Worker threads are
  # further entry points: a compiled binary embeds them under /$bunfs/root/ only when listed
  # (src/preprocess/pool.ts looks for its worker there).
  set -- "$@" src/cli.ts
  for extra in $WORKER_ENTRIES; do
    if [ -f "$extra" ]; then set -- "$@" "$extra"; fi
  done
  mkdir -p "$dir"
  "$BUN" build "$@" --outfile "$dir/herd" >"$TMP/compile.log" 2>&1 \
    || { cat "$TMP/compile.log" >&2; die "bun build failed for linux-$arch"; }
  rm -f "$dir"/*.map
}

sha_file() { # write FILE.sha256 as `sha256sum -c` expects, with the bare file name
  (cd "$(dirname "$1")" && sha256sum "$(basename "$1")" >"$(basename "$1").sha256")
}

package() {
  arch=$1 bin=$2
  name="herd-$VERSION-linux-$arch"
  stage="$TMP/stage-$arch/$name"
  mkdir -p "$stage/config" "$stage/systemd"
  cp "$bin" "$stage/herd"
  cp config/herd.example.yaml "$stage/config/"
  cp systemd/herd.service "$stage/systemd/"
  cp LICENSE README.md "$stage/"
  find "$stage" -type d -exec chmod 0755 {} +
  find "$stage" -type f -exec chmod 0644 {} +
  chmod 0755 "$stage/herd"
  tar --sort=name --format=gnu --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
    -C "$TMP/stage-$arch" -cf - "$name" | gzip -n "-$GZIP_LEVEL" >"$OUT/$name.tar.gz.part"
  mv "$OUT/$name.tar.gz.part" "$OUT/$name.tar.gz"
  sha_file "$OUT/$name.tar.gz"
}

mkdir -p "$OUT"
# Remove only what this script makes, so --out can point at a directory with other files.
rm -rf "$OUT/linux-x64" "$OUT/linux-arm64"
rm -f "$OUT/herd" "$OUT/herd.sha256" "$OUT/VERSION" "$OUT/install.sh" "$OUT"/herd-*-linux-*.tar.gz "$OUT"/herd-*-linux-*.tar.gz.sha256

note "herd $VERSION commit $COMMIT, bun $BUN_VERSION, SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH"
built=
for arch in $ARCHES; do
  dir="$OUT/linux-$arch"
  if ! compile "$arch" "$dir"; then
    note "skip linux-$arch: the bun-linux-$arch $BUN_VERSION runtime is not available to cross-compile"
    rm -rf "$dir"
    continue
  fi
  sha_file "$dir/herd"
  package "$arch" "$dir/herd"
  if [ "$arch" = "$HOST_ARCH" ]; then
    cp "$dir/herd" "$OUT/herd"
    sha_file "$OUT/herd"
  fi
  note "built $OUT/herd-$VERSION-linux-$arch.tar.gz"
  built="$built $arch"
done
[ -n "$built" ] || die "nothing was built"
printf '%s\n' "$VERSION" >"$OUT/VERSION"
cp scripts/install.sh "$OUT/install.sh"
chmod 0755 "$OUT/install.sh"
note "done:$built -> $OUT/"
