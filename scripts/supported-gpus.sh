#!/usr/bin/env bash
# supported-gpus.sh [RECIPE...]: fetch the supported-gpus.json that NVIDIA ships in the
# Debian driver package each recipe names, into
#   $KPRELOAD_CACHE/supported-gpus/<package>_<version>/supported-gpus.json   (uncompressed)
# with `kpreload recipe supported-gpus`: the recipes are read, and their driver versions
# resolved, by the same Go recipe loader as kpreload build (no second recipe grammar here).
# RECIPE is a recipe file or name; default: every recipe in recipes/ (those that name no
# list are left out). Idempotent: present lists are kept; each is renamed into place whole.
# Prints one line per package: <package>=<version> <path of supported-gpus.json>.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

cache=$(realpath -m "$KPRELOAD_CACHE")
args=()
for a in "$@"; do
  # Files given relative to the caller's directory stay valid after the cd below.
  if [ -f "$a" ]; then args+=("$(realpath "$a")"); else args+=("$a"); fi
done
cd "$here/.."
CGO_ENABLED=0 exec "${GO:-go}" run -trimpath ./cmd/kpreload recipe supported-gpus \
  --recipes "$here/../recipes" --cache "$cache" "${args[@]}"
