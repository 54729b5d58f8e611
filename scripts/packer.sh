#!/usr/bin/env bash
# packer.sh: build and install HashiCorp Packer (and Packer's QEMU plugin) from source through
# the Go module proxy, cached under $KPRELOAD_CACHE/packer/<version>/ and
# $KPRELOAD_CACHE/packer-plugin-qemu/<version>/. (The plugin SDK's code generator, packer-sdc,
# is a tool of go.mod: `go generate ./...` runs it as `go tool packer-sdc`.)
#
#   scripts/packer.sh                  install Packer if missing; print its path
#   scripts/packer.sh --qemu           also build packer-plugin-qemu; print its path after Packer's
#   scripts/packer.sh --qemu --install also install that plugin into Packer's plugin directory
#                                      (packer plugins install --path; PACKER_PLUGIN_PATH, else
#                                      Packer's default): Packer 1.10 and later no longer bundle it
#
# `go install github.com/hashicorp/packer@vX` is refused by the module proxy here, so the build
# happens in a scratch module that requires Packer and runs `go build github.com/hashicorp/packer`
# (the QEMU plugin likewise). Installs are idempotent and atomic: binaries are built into a
# temporary directory beside the final one and renamed into place, so an interrupted build never
# leaves a half-written binary. Versions live side by side: PACKER_VERSION=1.9.4 scripts/packer.sh
# builds the last MPL release next to the default one.
#
# Environment: PACKER_VERSION (default 1.15.0), PACKER_QEMU_VERSION (default 1.0.9),
# KPRELOAD_CACHE (default /var/cache/kpreload).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
. "$here/lib.sh"

: "${PACKER_VERSION:=1.15.0}"
: "${PACKER_QEMU_VERSION:=1.0.9}"

want_qemu=0 want_install=0
for arg in "$@"; do
  case "$arg" in
    --qemu) want_qemu=1 ;;
    --install) want_install=1 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) die "unknown argument $arg (want --qemu, --install or nothing)" ;;
  esac
done
[ "$want_install" = 0 ] || [ "$want_qemu" = 1 ] || die "--install installs the QEMU plugin: give --qemu too"

# replaces GOMOD: print each replace directive of GOMOD that points at a module (not a local
# directory) as "OLD[@VERSION] NEW@VERSION", one a line; single-line and block forms, with
# comments (// to the end of the line) stripped first.
replaces() {
  awk '
    function emit(l,   n, side, lhs, rhs) {
      n = split(l, side, /=>/)
      if (n != 2) return
      split(side[1], lhs, " "); split(side[2], rhs, " ")
      if (rhs[1] ~ /^(\.\.?\/|\/)/) return          # a local directory: not in the module proxy
      printf "%s%s %s%s\n", lhs[1], (lhs[2] != "" ? "@" lhs[2] : ""), rhs[1], (rhs[2] != "" ? "@" rhs[2] : "")
    }
    { sub(/[ \t]*\/\/.*$/, "") }
    /^replace[ \t]*\(/ { inblock = 1; next }
    inblock && /^[ \t]*\)/ { inblock = 0; next }
    inblock && NF { emit($0); next }
    /^replace[ \t]/ { sub(/^replace[ \t]+/, ""); emit($0) }
  ' "$1"
}

# The scratch build directories, removed when the script ends, however it ends.
build_dirs=()
trap 'rm -rf "${build_dirs[@]}"' EXIT

# gobuild MODULE VERSION PACKAGE DEST: build PACKAGE from MODULE@VERSION into DEST atomically.
# Replace directives of the required module are copied into the scratch module, because Go
# ignores replacements in dependencies (Packer and the SDK pin forks such as go-cty that way).
gobuild() {
  local module="$1" version="$2" pkg="$3" dest="$4"
  if [ -x "$dest" ]; then
    return 0
  fi
  local destdir work
  destdir="$(dirname "$dest")"
  mkdir -p "$destdir"
  work="$(mktemp -d "$destdir/.build.XXXXXX")"
  build_dirs+=("$work")
  log "building $pkg from $module v$version (several minutes on a small machine)"
  (
    cd "$work"
    export GOFLAGS=-mod=mod
    go mod init kpreload.local/build >/dev/null 2>&1
    go mod edit -go=1.21
    go get "$module@v$version" >/dev/null
    local gomod
    gomod="$(go mod download -json "$module@v$version" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')"
    [ -f "$gomod" ] || die "cannot find go.mod of $module@v$version"
    # Copy single-line and block replace directives, comments stripped: go.mod comments
    # run from // to the end of the line (Packer 1.15's go-cty replace carries one).
    replaces "$gomod" | while read -r from to; do
      go mod edit -replace="$from=$to"
    done
    go get "$module@v$version" >/dev/null
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$work/out" "$pkg"
  )
  "$work/out" --version >/dev/null 2>&1 || "$work/out" --help >/dev/null 2>&1 || true
  mv -f "$work/out" "$dest"
}

packer_bin="$KPRELOAD_CACHE/packer/$PACKER_VERSION/packer"
gobuild github.com/hashicorp/packer "$PACKER_VERSION" github.com/hashicorp/packer "$packer_bin"
got="$("$packer_bin" version 2>/dev/null | head -n1)"
case "$got" in
  *"v$PACKER_VERSION") ;;
  *) rm -f "$packer_bin"; die "$packer_bin reports version '$got', want $PACKER_VERSION (removed)" ;;
esac
echo "$packer_bin"

if [ "$want_qemu" = 1 ]; then
  # The plugin's tagged source says its own version (version.Version, no prerelease), which
  # its `describe` reports and `packer plugins install --path` names the install by. 1.0.9
  # is the QEMU builder Packer 1.9.4 bundled; later releases need packer-plugin-sdk versions
  # (v0.6.11 for 1.1.7) that the module proxy here does not serve.
  qemu_bin="$KPRELOAD_CACHE/packer-plugin-qemu/$PACKER_QEMU_VERSION/packer-plugin-qemu"
  gobuild github.com/hashicorp/packer-plugin-qemu "$PACKER_QEMU_VERSION" \
    github.com/hashicorp/packer-plugin-qemu "$qemu_bin"
  described="$("$qemu_bin" describe 2>/dev/null || true)"
  case "$described" in
    *"\"version\":\"$PACKER_QEMU_VERSION\""*) ;;
    *) rm -f "$qemu_bin"; die "$qemu_bin describe says '$described', want version $PACKER_QEMU_VERSION (removed)" ;;
  esac
  if [ "$want_install" = 1 ]; then
    case "$PACKER_VERSION" in
      1.[0-9].*) log "Packer $PACKER_VERSION bundles its QEMU builder: nothing to install" ;;
      *) CHECKPOINT_DISABLE=1 "$packer_bin" plugins install --path "$qemu_bin" github.com/hashicorp/qemu >&2 ||
           die "packer plugins install --path $qemu_bin github.com/hashicorp/qemu failed" ;;
    esac
  fi
  echo "$qemu_bin"
fi
