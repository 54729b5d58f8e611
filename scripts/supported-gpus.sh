#!/usr/bin/env bash
# supported-gpus.sh [RECIPE.yaml...]: fetch the supported-gpus.json that NVIDIA ships in
# the Debian driver package each recipe names (its `supported-gpus: {package, path}`),
# with apt-get download and dpkg -x (nothing is installed) from the recipe's suite (its
# top-level `suite:`, default bookworm; every suite through apt_suite_opts), into
#   $KPRELOAD_CACHE/supported-gpus/<package>_<version>/supported-gpus.json   (uncompressed)
# Default recipes: recipes/nvidia-*.yaml (nvidia-driver 535.261.03-1 and 550.163.01-2,
# nvidia-tesla-535/-470 drivers from bookworm, nvidia-tesla-550/-450 drivers from sid). Idempotent: present files are kept; each file is written to a
# temporary name and renamed, so an interrupted run never leaves a half file.
# Prints one line per package: <package>=<version> <path of supported-gpus.json>.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

[ $# -gt 0 ] || set -- "$here"/../recipes/nvidia-*.yaml
debs="$KPRELOAD_CACHE/debs"
out="$KPRELOAD_CACHE/supported-gpus"
mkdir -p "$debs" "$out"

# field RECIPE KEY: the value of KEY inside the recipe's top-level supported-gpus: block.
field() {
  awk -v key="$2" '
    /^supported-gpus:/ { in_block = 1; next }
    /^[^ #]/ { in_block = 0 }
    in_block && $1 == key":" { sub(/^[^:]*:[ \t]*/, ""); sub(/[ \t]+#.*$/, ""); gsub(/"/, ""); print; exit }
  ' "$1"
}

declare -A done_pkgs=()
for recipe in "$@"; do
  [ -f "$recipe" ] || die "recipe $recipe not found"
  spec=$(field "$recipe" package)
  path=$(field "$recipe" path)
  if [ -z "$spec" ]; then
    warn "$recipe names no supported-gpus package; skipped"
    continue
  fi
  [ -n "$path" ] || die "$recipe: supported-gpus.package is set but supported-gpus.path is not"
  [ -z "${done_pkgs[$spec]+x}" ] || continue
  done_pkgs[$spec]=1
  suite=$(awk '/^suite:/ { sub(/^suite:[ \t]*/, ""); sub(/[ \t]+#.*$/, ""); gsub(/"/, ""); print; exit }' "$recipe")
  o=$(apt_suite_opts "$suite") || exit 1
  mapfile -t apt_opts <<<"$o"
  pkg=${spec%%=*}
  ver=${spec#*=}
  [ "$pkg" != "$spec" ] || die "$recipe: supported-gpus.package $spec: want PACKAGE=VERSION"
  dest="$out/${pkg}_${ver}/supported-gpus.json"
  if [ ! -s "$dest" ]; then
    log "fetching supported-gpus.json from $pkg $ver"
    # Debian file names drop the epoch and escape ':' as %3a; versions here have none.
    deb=$(ls "$debs/${pkg}_${ver}_"*.deb 2>/dev/null | head -n1 || true)
    if [ -z "$deb" ]; then
      mkdir -p "$KPRELOAD_CACHE/logs"
      (cd "$debs" && apt-get "${apt_opts[@]}" download -q "$pkg=$ver" >>"$KPRELOAD_CACHE/logs/supported-gpus-apt.log" 2>&1) ||
        die "apt-get download $pkg=$ver (suite ${suite:-bookworm}) failed (log: $KPRELOAD_CACHE/logs/supported-gpus-apt.log)"
      deb=$(ls "$debs/${pkg}_${ver}_"*.deb | head -n1)
    fi
    tmp=$(mktemp -d "$out/.tmp.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    dpkg -x "$deb" "$tmp/root"
    src="$tmp/root/$path"
    [ -f "$src" ] || die "$deb has no $path"
    case "$src" in
      *.gz) gzip -dc "$src" >"$tmp/supported-gpus.json" ;;
      *) cp "$src" "$tmp/supported-gpus.json" ;;
    esac
    mkdir -p "$(dirname "$dest")"
    mv "$tmp/supported-gpus.json" "$dest.tmp"
    mv "$dest.tmp" "$dest"
    rm -rf "$tmp"
    trap - EXIT
  fi
  printf '%s=%s %s\n' "$pkg" "$ver" "$dest"
done
