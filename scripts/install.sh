#!/bin/sh
# herd installer: installs (or upgrades, or removes) herd on a Linux GPU host.
#
#   curl -fsSL <release-url>/install.sh | sudo sh
#   curl -fsSL <release-url>/install.sh | sudo sh -s -- --uninstall
#   sh install.sh [--base-url URL] [--version VERSION] [--arch x64|arm64] [--root DIR]
#                 [--uninstall [--purge]] [--help]
#
#   --base-url URL  release directory holding VERSION, herd-<version>-linux-<arch>.tar.gz and its
#                   .sha256 (what scripts/build.sh writes to dist/). https://, http://, file:///DIR
#                   or a plain /DIR (air-gapped hosts). Env: HERD_BASE_URL.
#   --version V     install this version instead of the one named in <base-url>/VERSION. Env: HERD_VERSION.
#   --arch A        x64 or arm64; default: this machine's. Env: HERD_ARCH.
#   --root DIR      install under DIR (DESTDIR-style: DIR/usr/local/bin/herd, DIR/etc/herd, ...);
#                   no user is created and systemd is not touched. Env: HERD_ROOT.
#   --uninstall     remove the binary, unit and docs; keep /etc/herd and /var/lib/herd.
#   --purge         with --uninstall: also delete /etc/herd, /var/lib/herd and the herd user.
#
# Installs /usr/local/bin/herd, /etc/herd/herd.yaml (from the example, never over an existing one),
# /etc/herd/herd.example.yaml, /var/lib/herd, /etc/systemd/system/herd.service,
# /usr/local/share/doc/herd, and the `herd` system user. Safe to run again; on an upgrade the binary
# is replaced atomically and the service restarted only if it was running.
# Nothing is installed unless the tarball matches its SHA-256.
set -eu

# Release location. TO BE SET when the project publishes releases; until then pass --base-url.
DEFAULT_BASE_URL="https://releases.herd.invalid/latest"

die() { echo "install.sh: error: $*" >&2; exit 1; }
say() { echo "install.sh: $*"; }

# The header comment above is the help text.
usage() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$1" 2>/dev/null || true; }

have() { command -v "$1" >/dev/null 2>&1; }

sha256_of() {
  if have sha256sum; then sha256sum "$1" | cut -d' ' -f1
  elif have shasum; then shasum -a 256 "$1" | cut -d' ' -f1
  elif have openssl; then openssl dgst -sha256 -r "$1" | cut -d' ' -f1
  else die "no SHA-256 tool found (sha256sum, shasum or openssl)"
  fi
}

# fetch URL DEST: file:// and plain paths are copied, http(s) downloaded with curl or wget.
fetch() {
  case $1 in
    file://*|/*)
      src=${1#file://}
      [ -f "$src" ] || die "not found: $src"
      cp "$src" "$2" || die "cannot read $src"
      ;;
    https://*|http://*)
      case $1 in *.invalid/*) die "no release URL is configured yet: pass --base-url URL or set HERD_BASE_URL" ;; esac
      if have curl; then
        curl -fsSL --retry 3 --connect-timeout 20 -o "$2" "$1" || die "download failed: $1"
      elif have wget; then
        wget -q -O "$2" "$1" || die "download failed: $1"
      else
        die "curl or wget is needed to download $1"
      fi
      ;;
    *) die "unsupported URL '$1' (use https://, http://, file:// or an absolute path)" ;;
  esac
}

host_arch() {
  case $(uname -m) in
    x86_64|amd64) echo x64 ;;
    aarch64|arm64) echo arm64 ;;
    *) echo "unsupported:$(uname -m)" ;;
  esac
}

# Globals set by setup(): paths under ROOT and whether this run touches the real system.
setup_paths() {
  BIN_DIR=$ROOT/usr/local/bin
  BIN=$BIN_DIR/herd
  CONF_DIR=$ROOT/etc/herd
  CONF=$CONF_DIR/herd.yaml
  EXAMPLE=$CONF_DIR/herd.example.yaml
  DATA=$ROOT/var/lib/herd
  UNIT_DIR=$ROOT/etc/systemd/system
  UNIT=$UNIT_DIR/herd.service
  DOC=$ROOT/usr/local/share/doc/herd
  if [ -z "$ROOT" ] && [ "$(id -u)" = 0 ]; then SYSTEM=1; else SYSTEM=0; fi
  # HERD_SYSTEMCTL (tests only): a stand-in systemctl, used even under --root.
  SYSTEMCTL=${HERD_SYSTEMCTL:-systemctl}
  if [ -n "${HERD_SYSTEMCTL:-}" ]; then SYSTEMD=1
  elif [ -z "$ROOT" ] && [ -d /run/systemd/system ] && have systemctl; then SYSTEMD=1
  else SYSTEMD=0; fi
}

service_active() { [ "$SYSTEMD" = 1 ] && "$SYSTEMCTL" is-active --quiet herd.service; }

# Copy SRC to DEST atomically with MODE: a temporary file in DEST's directory, then rename, so a
# running herd (or a reader of the unit) never sees a half-written file. Returns 1 if unchanged.
put_file() {
  src=$1 dest=$2 mode=$3
  if [ -f "$dest" ] && cmp -s "$src" "$dest"; then return 1; fi
  tmpf="$dest.new.$$"
  cp "$src" "$tmpf" || die "cannot write $tmpf"
  chmod "$mode" "$tmpf"
  mv -f "$tmpf" "$dest" || { rm -f "$tmpf"; die "cannot replace $dest"; }
  return 0
}

ensure_user() {
  if [ "$SYSTEM" != 1 ]; then
    if [ -n "$ROOT" ]; then say "note: --root: not creating the herd user (on the target: useradd --system --user-group --home-dir /var/lib/herd herd)"
    else say "note: not root: not creating the herd user"; fi
    return 0
  fi
  for g in video render; do
    # The unit asks for both groups (GPU device access); systemd refuses to start if one is missing.
    if ! getent group "$g" >/dev/null 2>&1; then
      if have groupadd && groupadd --system "$g"; then say "created system group $g"
      else say "warning: group $g is missing and could not be created; create it or drop it from SupplementaryGroups"; fi
    fi
  done
  if getent passwd herd >/dev/null 2>&1; then return 0; fi
  have useradd || die "useradd not found: create a system user 'herd' (home /var/lib/herd) and re-run"
  shell=/usr/sbin/nologin
  [ -x "$shell" ] || shell=/sbin/nologin
  [ -x "$shell" ] || shell=/bin/false
  useradd --system --user-group --home-dir /var/lib/herd --no-create-home --shell "$shell" \
    --comment "herd LLM service" herd || die "useradd herd failed"
  say "created system user herd"
}

do_install() {
  case $ARCH in x64|arm64) ;; *) die "unsupported architecture '${ARCH#unsupported:}' (herd ships x64 and arm64)" ;; esac
  if [ -z "$ROOT" ] && [ "$SYSTEM" != 1 ]; then
    die "run as root (curl ... | sudo sh) or install under a directory with --root DIR"
  fi
  for c in tar gzip cmp mktemp; do have "$c" || die "$c is needed"; done

  TMP=$(mktemp -d "${TMPDIR:-/tmp}/herd-install.XXXXXX") || die "mktemp failed"
  trap 'rm -rf "$TMP"' EXIT
  trap 'exit 130' INT TERM

  base=${BASE_URL%/}
  if [ -z "$VERSION" ]; then
    fetch "$base/VERSION" "$TMP/VERSION"
    VERSION=$(head -n 1 "$TMP/VERSION" | tr -d '[:space:]')
  fi
  case $VERSION in ''|*[!0-9A-Za-z.+-]*) die "bad version '$VERSION'" ;; esac
  name="herd-$VERSION-linux-$ARCH"
  say "downloading $name from $base"
  fetch "$base/$name.tar.gz" "$TMP/$name.tar.gz"
  fetch "$base/$name.tar.gz.sha256" "$TMP/$name.tar.gz.sha256"

  expected=$(cut -d' ' -f1 <"$TMP/$name.tar.gz.sha256" | head -n 1 | tr 'A-F' 'a-f')
  case $expected in
    *[!0-9a-f]*|'') die "$name.tar.gz.sha256 does not hold a SHA-256; nothing was installed" ;;
  esac
  [ ${#expected} -eq 64 ] || die "$name.tar.gz.sha256 does not hold a SHA-256; nothing was installed"
  actual=$(sha256_of "$TMP/$name.tar.gz")
  [ "$actual" = "$expected" ] || die "checksum mismatch for $name.tar.gz: expected $expected, got $actual; nothing was installed"
  say "checksum ok ($actual)"

  mkdir "$TMP/x"
  tar -xzf "$TMP/$name.tar.gz" -C "$TMP/x" || die "cannot unpack $name.tar.gz; nothing was installed"
  pkg="$TMP/x/$name"
  for f in herd config/herd.example.yaml systemd/herd.service LICENSE README.md; do
    [ -f "$pkg/$f" ] || die "$name.tar.gz lacks $f; nothing was installed"
  done
  if [ "$ARCH" = "$(host_arch)" ]; then
    out=$("$pkg/herd" version 2>&1) || die "the downloaded herd does not run on this host: $out"
    new_version=$(printf '%s\n' "$out" | head -n 1)
  else
    new_version="herd $VERSION (linux-$ARCH, not run on this host)"
  fi

  was_active=0
  if service_active; then was_active=1; fi
  old_version=
  if [ -x "$BIN" ]; then old_version=$("$BIN" version 2>/dev/null | head -n 1); fi
  if [ -x "$BIN" ] && [ -z "$old_version" ]; then old_version="unknown version"; fi

  ensure_user
  herd_user=0
  if [ "$SYSTEM" = 1 ] && getent passwd herd >/dev/null 2>&1; then herd_user=1; fi

  mkdir -p "$BIN_DIR" "$CONF_DIR" "$DATA" "$UNIT_DIR" "$DOC"
  changed=0
  if put_file "$pkg/herd" "$BIN" 0755; then
    changed=1
    if [ -n "$old_version" ]; then say "upgraded $BIN: $old_version -> $new_version"
    else say "installed $BIN ($new_version)"; fi
  else
    say "$BIN is already $new_version"
  fi

  # /etc/herd may hold API keys and the admin token: root-owned, readable by the herd group only.
  chmod 0750 "$CONF_DIR"
  if [ "$herd_user" = 1 ]; then chown root:herd "$CONF_DIR"; fi
  put_file "$pkg/config/herd.example.yaml" "$EXAMPLE" 0644 || true
  if [ -e "$CONF" ]; then
    say "kept existing $CONF (compare with $EXAMPLE for new keys)"
  else
    # Two example values do not suit an installed host: state in ./.herd next to the file (/etc is
    # read-only under the unit), so node.data_dir points at the service's StateDirectory; and a
    # fixed node.name, which is commented out so each host defaults to its own host name.
    sed -e 's#^\(  data_dir:[[:space:]]*\)\./\.herd#\1/var/lib/herd#' -e 's/^  name:/  # name:/' \
      "$pkg/config/herd.example.yaml" >"$CONF.new.$$" || die "cannot write $CONF_DIR"
    chmod 0640 "$CONF.new.$$"
    if [ "$herd_user" = 1 ]; then chown root:herd "$CONF.new.$$"; fi
    mv "$CONF.new.$$" "$CONF"
    say "created $CONF"
  fi

  chmod 0750 "$DATA"
  # Recursive, like systemd's StateDirectory= does when the owner is wrong: files left by a herd once
  # run as root (logs/, run/) must become writable for the service user.
  if [ "$herd_user" = 1 ]; then chown -R herd:herd "$DATA"; fi

  if put_file "$pkg/systemd/herd.service" "$UNIT" 0644; then changed=1; say "installed $UNIT"; fi
  put_file "$pkg/LICENSE" "$DOC/LICENSE" 0644 || true
  put_file "$pkg/README.md" "$DOC/README.md" 0644 || true
  if [ "$SYSTEM" = 1 ] && have restorecon; then restorecon "$BIN" "$UNIT" "$CONF_DIR" 2>/dev/null || true; fi

  if [ "$SYSTEMD" = 1 ]; then
    "$SYSTEMCTL" daemon-reload || die "systemctl daemon-reload failed"
    if [ "$was_active" = 1 ] && [ "$changed" = 1 ]; then
      say "restarting herd.service (it was running; the stop drains in-flight requests)"
      "$SYSTEMCTL" restart herd.service || die "systemctl restart herd failed: see journalctl -u herd"
    fi
  elif [ -n "$ROOT" ]; then
    say "note: --root: systemd not touched"
  else
    say "note: systemd is not running here: start herd yourself ($BIN run --config /etc/herd/herd.yaml)"
  fi

  cat <<EOF

herd $VERSION is installed.
Next steps:
  1. Edit /etc/herd/herd.yaml: models and engines. To serve other hosts set frontend.listen
     (e.g. 0.0.0.0:8000) and frontend.api_keys first.
  2. Check it:        herd config check /etc/herd/herd.yaml
  3. Start on boot:   systemctl enable --now herd
  4. Watch it:        journalctl -u herd -f
                      curl -s 127.0.0.1:8000/v1/models
EOF
  if [ "$was_active" = 1 ] && [ "$changed" = 1 ]; then echo "(herd.service was running and has been restarted.)"; fi
}

do_uninstall() {
  if [ -z "$ROOT" ] && [ "$SYSTEM" != 1 ]; then
    die "run as root (sudo sh install.sh --uninstall) or pass --root DIR"
  fi
  if [ "$SYSTEMD" = 1 ] && [ -f "$UNIT" ]; then
    # `disable --now` stops the service first; the stop drains in-flight requests.
    "$SYSTEMCTL" disable --now herd.service 2>/dev/null || say "warning: could not stop/disable herd.service"
  fi
  removed=0
  for f in "$BIN" "$UNIT" "$EXAMPLE"; do
    if [ -e "$f" ]; then rm -f "$f"; say "removed $f"; removed=1; fi
  done
  if [ -d "$DOC" ]; then rm -rf "$DOC"; say "removed $DOC"; removed=1; fi
  if [ "$PURGE" = 1 ]; then
    for d in "$CONF_DIR" "$DATA" "$UNIT_DIR/herd.service.d"; do
      if [ -e "$d" ]; then rm -rf "$d"; say "purged $d"; removed=1; fi
    done
    if [ "$SYSTEM" = 1 ] && getent passwd herd >/dev/null 2>&1; then
      if userdel herd 2>/dev/null; then say "removed user herd"; else say "warning: userdel herd failed"; fi
    fi
  else
    if [ -e "$CONF_DIR" ]; then say "kept $CONF_DIR (configuration); --purge deletes it"; fi
    if [ -e "$DATA" ]; then say "kept $DATA (logs and state); --purge deletes it"; fi
  fi
  if [ "$SYSTEMD" = 1 ]; then "$SYSTEMCTL" daemon-reload; fi
  if [ "$removed" = 0 ]; then say "herd is not installed here: nothing to remove"; fi
  say "uninstall done"
}

main() {
  BASE_URL=${HERD_BASE_URL:-$DEFAULT_BASE_URL}
  VERSION=${HERD_VERSION:-}
  ARCH=${HERD_ARCH:-}
  ROOT=${HERD_ROOT:-}
  UNINSTALL=0
  PURGE=0
  while [ $# -gt 0 ]; do
    case $1 in
      --base-url) [ $# -ge 2 ] || die "--base-url needs a value"; BASE_URL=$2; shift 2 ;;
      --base-url=*) BASE_URL=${1#*=}; shift ;;
      --version) [ $# -ge 2 ] || die "--version needs a value"; VERSION=$2; shift 2 ;;
      --version=*) VERSION=${1#*=}; shift ;;
      --arch) [ $# -ge 2 ] || die "--arch needs a value"; ARCH=$2; shift 2 ;;
      --arch=*) ARCH=${1#*=}; shift ;;
      --root) [ $# -ge 2 ] || die "--root needs a value"; ROOT=$2; shift 2 ;;
      --root=*) ROOT=${1#*=}; shift ;;
      --uninstall) UNINSTALL=1; shift ;;
      --purge) PURGE=1; shift ;;
      -h|--help) usage "$0"; [ -f "$0" ] || echo "options: --base-url URL --version V --arch A --root DIR --uninstall --purge"; exit 0 ;;
      *) die "unknown option '$1' (see --help)" ;;
    esac
  done
  [ "$PURGE" = 0 ] || [ "$UNINSTALL" = 1 ] || die "--purge only goes with --uninstall"
  [ -n "$ARCH" ] || ARCH=$(host_arch)
  if [ -n "$ROOT" ]; then
    mkdir -p "$ROOT" || die "cannot create --root $ROOT"
    ROOT=$(cd "$ROOT" && pwd) || die "cannot enter --root $ROOT"
    [ "$ROOT" != / ] || ROOT=
  fi
  setup_paths
  if [ "$UNINSTALL" = 1 ]; then do_uninstall; else do_install; fi
}

# Everything runs from here, so a download cut short by `curl | sh` executes nothing.
main "$@"
