#!/usr/bin/env bash
# nvidia-ctk.sh: build and install NVIDIA's nvidia-ctk (github.com/NVIDIA/nvidia-container-toolkit)
# from source through the Go module proxy, cached under $KPRELOAD_CACHE/nvidia-ctk/<version>/.
#
#   scripts/nvidia-ctk.sh        install nvidia-ctk if missing; print its path
#
# nvidia-ctk is the reference kpreload's CDI specs are compared with (`nvidia-ctk cdi generate`);
# it is not installed on kpreload images. The build happens in a scratch module that requires the
# toolkit and runs `go build github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk`. It needs
# cgo (go-nvml dlopens libnvidia-ml.so.1), so the binary links glibc dynamically: it runs on any
# glibc at least as new as the build host's (Debian 12: 2.36; Ubuntu 24.04 has 2.39). The install is idempotent and atomic: the binary is built into a temporary
# directory beside the final one and renamed into place.
#
# Environment: NVIDIA_CTK_VERSION (default 1.20.1), KPRELOAD_CACHE (default /var/cache/kpreload).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
. "$here/lib.sh"

: "${NVIDIA_CTK_VERSION:=1.20.1}"

for arg in "$@"; do
  case "$arg" in
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $arg (want nothing or --help)" ;;
  esac
done

module=github.com/NVIDIA/nvidia-container-toolkit
dest="$KPRELOAD_CACHE/nvidia-ctk/$NVIDIA_CTK_VERSION/nvidia-ctk"

# A binary that does not report the wanted version (an older build) is rebuilt.
if ! { [ -x "$dest" ] && "$dest" --version 2>/dev/null | head -n1 | grep -qF "$NVIDIA_CTK_VERSION"; }; then
  destdir="$(dirname "$dest")"
  mkdir -p "$destdir"
  work="$(mktemp -d "$destdir/.build.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  log "building nvidia-ctk from $module v$NVIDIA_CTK_VERSION"
  (
    cd "$work"
    export GOFLAGS=-mod=mod
    go mod init kpreload.local/build-nvidia-ctk >/dev/null 2>&1
    go get "$module@v$NVIDIA_CTK_VERSION" >/dev/null
    CGO_ENABLED=1 go build -trimpath \
      -ldflags="-s -w -X $module/internal/info.version=$NVIDIA_CTK_VERSION" -o "$work/nvidia-ctk" "$module/cmd/nvidia-ctk"
  )
  "$work/nvidia-ctk" --version >/dev/null || die "the built nvidia-ctk does not run"
  mv -f "$work/nvidia-ctk" "$dest"
fi

got="$("$dest" --version 2>/dev/null | head -n1)"
case "$got" in
  *"$NVIDIA_CTK_VERSION"*) ;;
  *) die "$dest reports version '$got', want $NVIDIA_CTK_VERSION" ;;
esac
echo "$dest"
