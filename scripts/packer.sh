#!/usr/bin/env bash
# packer.sh: build and install HashiCorp Packer (and the plugin SDK's packer-sdc code generator)
# from source through the Go module proxy, cached under $KPRELOAD_CACHE/packer/<version>/.
#
#   scripts/packer.sh            install Packer if missing; print its path
#   scripts/packer.sh --sdc      also install packer-sdc; print both paths (packer first)
#
# `go install github.com/hashicorp/packer@vX` is refused by the module proxy here, so the build
# happens in a scratch module that requires Packer and runs `go build github.com/hashicorp/packer`.
# Installs are idempotent and atomic: binaries are built into a temporary directory beside the
# final one and renamed into place, so an interrupted build never leaves a half-written binary.
#
# Environment: PACKER_VERSION (default 1.9.4), PACKER_SDC_VERSION (default: the SDK version in
# go.mod), KPRELOAD_CACHE (default /var/cache/kpreload).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
. "$here/lib.sh"

: "${PACKER_VERSION:=1.9.4}"
if [ -z "${PACKER_SDC_VERSION:-}" ]; then
  PACKER_SDC_VERSION="$(awk '$1 == "github.com/hashicorp/packer-plugin-sdk" { print $2; exit }' "$here/../go.mod" 2>/dev/null || true)"
  PACKER_SDC_VERSION="${PACKER_SDC_VERSION#v}"
  : "${PACKER_SDC_VERSION:=0.6.4}"
fi

want_sdc=0
for arg in "$@"; do
  case "$arg" in
    --sdc) want_sdc=1 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $arg (want --sdc or nothing)" ;;
  esac
done

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
  trap 'rm -rf "$work"' RETURN
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
    # Copy single-line and block replace directives.
    awk '
      /^replace[ \t]*\(/ { inblock = 1; next }
      inblock && /^\)/ { inblock = 0; next }
      inblock && NF { print; next }
      /^replace[ \t]/ { sub(/^replace[ \t]+/, ""); print }
    ' "$gomod" | while read -r line; do
      [ -n "$line" ] || continue
      from="$(printf '%s' "$line" | awk -F'=>' '{ gsub(/^[ \t]+|[ \t]+$/, "", $1); print $1 }')"
      to="$(printf '%s' "$line" | awk -F'=>' '{ gsub(/^[ \t]+|[ \t]+$/, "", $2); print $2 }')"
      from="${from%% *}"   # drop a version on the left-hand side
      case "$to" in ./*|../*|/*) continue ;; esac
      go mod edit -replace="$from=${to// /@}"
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
  *"$PACKER_VERSION"*) ;;
  *) die "$packer_bin reports version '$got', want $PACKER_VERSION" ;;
esac
echo "$packer_bin"

if [ "$want_sdc" = 1 ]; then
  sdc_bin="$KPRELOAD_CACHE/packer-sdc/$PACKER_SDC_VERSION/packer-sdc"
  gobuild github.com/hashicorp/packer-plugin-sdk "$PACKER_SDC_VERSION" \
    github.com/hashicorp/packer-plugin-sdk/cmd/packer-sdc "$sdc_bin"
  echo "$sdc_bin"
fi
