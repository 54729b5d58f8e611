#!/usr/bin/env bash
# bench-build.sh: `kpreload build` against the sequential path people use today,
# `dkms autoinstall` once per kernel, on the same matrix, measured in one run.
#
#   scripts/bench-build.sh [--keep] [--no-nvidia]
#
#   --keep       keep the work directory (it is always kept when something fails)
#   --no-nvidia  leave nvidia-535 out of the matrix (a quick run of the test driver only)
#
# Matrix: the test driver (recipes/testdriver.yaml) for 6.1.0-56-cloud-amd64 and
# 6.12.117+deb12-cloud-amd64, and nvidia-535 (nvidia-kernel-dkms 535.261.03) for
# 6.1.0-56-cloud-amd64.
#   kpreload: `kpreload build testdriver nvidia-535:6.1.0-56-cloud-amd64` into a fresh,
#             empty module cache (cold: every cell compiles), then the same command again
#             (no-op: every cell is cached; target under 5 s).
#   dkms:     for each kernel, one after the other, what a machine with the kernel's
#             headers installed does: `dkms add` of that kernel's packages and
#             `dkms autoinstall -k KVER` (build + install). It runs the real dkms in an
#             isolated tree (--dkmstree, --sourcetree, --installtree, --kernelsourcedir
#             and --no-depmod, signing disabled) as builder/dkms does, so nothing on the
#             host changes; NVIDIA's Makefile gets SYSSRC/SYSOUT as kpreload gives it,
#             since the headers are unpacked rather than installed.
# Both sides use the unpacked kernels and sources under $KPRELOAD_CACHE (fetched first,
# outside the timings) and the same compiler (the kernel's gcc-12). Progress goes to
# stderr, a markdown table to stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
top=$(cd "$here/.." && pwd)

keep=0
nvidia=1
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1 ;;
    --no-nvidia) nvidia=0 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
  shift
done

k61=6.1.0-56-cloud-amd64
k612=6.12.117+deb12-cloud-amd64
for tool in dkms make gcc-12 go; do
  command -v "$tool" >/dev/null || die "$tool is missing: run scripts/deps.sh"
done

work=$(mktemp -d /tmp/kpreload-bench-build.XXXXXX)
ok=0
cleanup() { if [ "$ok" = 1 ] && [ "$keep" = 0 ]; then rm -rf "$work"; else echo "work directory kept: $work" >&2; fi; }
trap cleanup EXIT

log "building kpreload"
(cd "$top" && CGO_ENABLED=0 go build -o "$work/kpreload" ./cmd/kpreload)
kp="$work/kpreload"

log "fetching the kernels and the sources (not timed)"
for k in "$k61" "$k612"; do "$here/kernels.sh" "$k" >&2; done
cells=(testdriver)
[ "$nvidia" = 1 ] && cells+=("nvidia-535:$k61")
# The dkms side needs nvidia-kernel-dkms unpacked where kpreload build unpacks it
# ($KPRELOAD_CACHE/sources/<package>_<version>): the same apt-get download + dpkg -x.
nvsrc=""
if [ "$nvidia" = 1 ]; then
  pkgdir="$KPRELOAD_CACHE/sources/nvidia-kernel-dkms_535.261.03-1"
  if [ ! -d "$pkgdir" ]; then
    mkdir -p "$KPRELOAD_CACHE/debs"
    (cd "$KPRELOAD_CACHE/debs" && [ -n "$(ls nvidia-kernel-dkms_535.261.03-1_*.deb 2>/dev/null)" ] || apt-get download -q nvidia-kernel-dkms=535.261.03-1 >&2)
    tmp=$(mktemp -d "$KPRELOAD_CACHE/sources/.tmp-bench-XXXXXX")
    dpkg -x "$KPRELOAD_CACHE"/debs/nvidia-kernel-dkms_535.261.03-1_*.deb "$tmp"
    chmod 755 "$tmp"
    mv "$tmp" "$pkgdir"
  fi
  nvsrc="$pkgdir/usr/src/nvidia-current-535.261.03"
fi

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

# --- kpreload, cold -------------------------------------------------------------------
log "kpreload build ${cells[*]} (cold cache)"
t0=$(now)
if ! (cd "$top" && "$kp" build --cache "$work/cache" --json "${cells[@]}" >"$work/cold.json" 2>"$work/cold.log"); then
  cat "$work/cold.log" >&2
  die "kpreload build (cold) failed"
fi
t1=$(now)
kp_cold=$(elapsed "$t0" "$t1")
ncold=$(grep -c '"state": "ok"' "$work/cold.json" || true)

log "kpreload build ${cells[*]} (again: no-op)"
t0=$(now)
(cd "$top" && "$kp" build --cache "$work/cache" --json "${cells[@]}" >"$work/noop.json" 2>"$work/noop.log") || die "kpreload build (no-op) failed"
t1=$(now)
kp_noop=$(elapsed "$t0" "$t1")
ncached=$(grep -c '"state": "cached"' "$work/noop.json" || true)
ncells=$(grep -c '"state":' "$work/noop.json" || true)

# --- sequential dkms autoinstall ------------------------------------------------------
# shadow DIR HEADERS ROOT: a kernel build directory whose entries link into HEADERS and
# whose Makefile includes the unpacked -common Makefile (Debian's headers include
# /usr/src/linux-headers-<x>-common/Makefile by absolute path), as builder/dkms does.
shadow() {
  local dir=$1 headers=$2 root=$3 e
  mkdir -p "$dir"
  for e in "$headers"/* "$headers"/.[!.]*; do
    [ -e "$e" ] || [ -L "$e" ] || continue
    [ "$(basename "$e")" = Makefile ] && continue
    ln -s "$e" "$dir/$(basename "$e")"
  done
  sed -E "s|^include (/usr/src/[^ ]*)|include $root\\1|" "$headers/Makefile" >"$dir/Makefile"
}

seq_total=0
declare -A seq_time=()
for k in "$k61" "$k612"; do
  root="$KPRELOAD_CACHE/kernels/$k"
  headers="$root/usr/src/linux-headers-$k"
  common=$(readlink "$root/lib/modules/$k/source" || true)
  t="$work/dkms-$k"
  mkdir -p "$t/dkms" "$t/src" "$t/install/$k" "$t/tmp" "$t/nosign"
  shadow "$t/kernel" "$headers" "$root"
  cp -rL "$top/recipes/testdriver" "$t/src/kpreload-edu-1.0.0"
  pkgs=("kpreload-edu/1.0.0")
  if [ "$nvidia" = 1 ] && [ "$k" = "$k61" ]; then
    cp -r "$nvsrc" "$t/src/nvidia-current-535.261.03"
    pkgs+=("nvidia-current/535.261.03")
  fi
  opts=(--dkmstree "$t/dkms" --sourcetree "$t/src" --installtree "$t/install" --kernelsourcedir "$t/kernel")
  log "dkms add ${pkgs[*]} + dkms autoinstall -k $k"
  t0=$(now)
  (
    export LC_ALL=C TMPDIR="$t/tmp" MAKEFLAGS=CC=gcc-12
    export sign_file="$t/nosign/sign-file" mok_signing_key="$t/nosign/mok.key" mok_certificate="$t/nosign/mok.pub"
    export SYSSRC="$root$common" SYSOUT="$t/kernel"
    for p in "${pkgs[@]}"; do
      dkms add -m "${p%/*}" -v "${p#*/}" "${opts[@]}"
    done
    dkms autoinstall -k "$k" --arch x86_64 --no-depmod "${opts[@]}"
  ) >"$t/dkms.log" 2>&1 || { tail -30 "$t/dkms.log" >&2; die "dkms autoinstall for $k failed (log $t/dkms.log)"; }
  t1=$(now)
  n=$(find "$t/install/$k" -name '*.ko*' | wc -l)
  want=1
  [ "$nvidia" = 1 ] && [ "$k" = "$k61" ] && want=6
  [ "$n" -ge "$want" ] || die "dkms autoinstall for $k installed $n modules, want $want (log $t/dkms.log)"
  seq_time[$k]=$(elapsed "$t0" "$t1")
  seq_total=$(awk -v a="$seq_total" -v b="${seq_time[$k]}" 'BEGIN { printf "%.1f", a + b }')
done

ratio=$(awk -v a="$seq_total" -v b="$kp_cold" 'BEGIN { printf "%.2f", a / b }')
noop_ok=$(awk -v a="$kp_noop" 'BEGIN { print (a < 5) ? "yes" : "NO" }')
matrix="testdriver × {$k61, $k612}"
[ "$nvidia" = 1 ] && matrix="$matrix + nvidia-535 × $k61"

cat <<EOF
Build benchmark ($(nproc) CPUs, load average at the end $(cut -d' ' -f1-3 /proc/loadavg)); matrix: $matrix

| build | wall time (s) | cells compiled | speed-up (sequential dkms time ÷ this) |
| --- | ---: | ---: | ---: |
| sequential \`dkms add\` + \`dkms autoinstall -k\` per kernel | $seq_total | $ncold | 1.00 |
| \`kpreload build\`, cold cache | $kp_cold | $ncold | ${ratio}× |
| \`kpreload build\`, no-op rebuild (${ncached}/${ncells} cached; target < 5 s: $noop_ok) | $kp_noop | 0 | — |

Sequential dkms per kernel: $(for k in "$k61" "$k612"; do printf '%s %s s; ' "$k" "${seq_time[$k]}"; done)
EOF
ok=1
