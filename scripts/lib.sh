# lib.sh: shared settings for kpreload's scripts. Source it; do not run it.
# shellcheck shell=bash

# Where downloaded kernels, headers and other reusable inputs live between runs.
: "${KPRELOAD_CACHE:=/var/cache/kpreload}"
export KPRELOAD_CACHE
# The default kernel matrix for tests and the demo: one 6.1 cloud kernel (plain .ko,
# virtio modular) and one 6.12 backports cloud kernel (.ko.xz).
if [ -z "${KPRELOAD_KERNELS+x}" ]; then
  KPRELOAD_KERNELS=(6.1.0-56-cloud-amd64 6.12.117+deb12-cloud-amd64)
else
  read -r -a KPRELOAD_KERNELS <<<"$KPRELOAD_KERNELS"
fi

log()  { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die()  { printf 'error: %s\n' "$*" >&2; exit 1; }
