#!/usr/bin/env bash
# bench-boot.sh: kpreload's initramfs against Debian's own initramfs-tools, measured in
# one run, on the same kernel, root disk and devices, under QEMU TCG.
#
#   scripts/bench-boot.sh [--kernel KVER] [--runs N] [--slow-root S] [--json] [--keep] [--svg DIR]
#
#   --kernel KVER  kernel to boot (default 6.1.0-56-cloud-amd64; fetched with kernels.sh)
#   --runs N       boots and initramfs builds per variant (default 5); medians are reported,
#                  and each round's ratios (its boots run back to back) beside them
#   --json         print the result as JSON instead of the markdown table
#   --keep         keep the work directory (it is always kept when something fails)
#   --timeout S    give up on one boot after S seconds (default 120; a boot takes ~5-15 s)
#   --retries N    run a boot that hung (timed out) again, at most N times (default 1);
#                  hangs are counted in the output and their logs kept
#   --svg DIR      draw each round's boots (Debian's and kpreload's) on one time axis:
#                  DIR/round-N.svg
#   --slow-root S  also boot every variant with its root disk plugged in S seconds after
#                  QEMU starts (kpreload boot --root-late: PCIe hotplug through QEMU's
#                  monitor), as a cloud volume that appears while the machine boots, in
#                  the same rounds; a second table gives kernel start -> root mounted and
#                  -> test driver bound, whether the driver was bound before the root,
#                  and early against after the root round by round
#
# Every variant boots the same ext4 root disk (root=UUID=..., on virtio-blk, /sbin/init
# is kpreload-rootinit, which records what it saw and powers off) with QEMU's edu
# device, whose driver is the project's test driver built by the real dkms:
#   Debian:   mkinitramfs -d CONFDIR (the host's /etc/initramfs-tools with MODULES=most
#             and kpreload_edu in its modules file); the test driver is installed the way
#             dkms installs it, lib/modules/<kver>/updates/dkms/kpreload_edu.ko + depmod,
#             and udev in the initramfs loads it.
#   kpreload: kpreload initramfs --kernel K --root <unpacked kernel> --filesystems ext4 --cache <cache
#             holding the test driver>: /init decides after the root is mounted.
#   kpreload-early: the same with --complete (the index marked complete, as an image
#             whose root cache holds nothing more): /init decides after the first
#             coldplug and loads the driver while it finds the root.
# mkinitramfs only reads /lib/modules/<kver> and /boot/config-<kver>; the kernel is only
# unpacked under $KPRELOAD_CACHE/kernels/<kver>. Every mkinitramfs runs in a private
# mount namespace (unshare -m) where an overlay puts the unpacked modules, plus the
# test driver and depmod's output (kept in the work directory), over /lib, and the
# unpacked /boot is bound over /boot: nothing on the host changes, even when killed.
#
# Each boot must reach the root disk's init (pid 1 on /dev/vda) with edu bound to
# kpreload_edu before it, or the run fails. Progress goes to stderr, the table to
# stdout. Needs root (mount namespaces, apt-get) and `make build`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
top=$(cd "$here/.." && pwd)

kver=6.1.0-56-cloud-amd64
runs=5
json=0
keep=0
timeout=120
retries=1
svgdir=""
slow=""
usage() { sed -n '2,22s/^# \{0,1\}//p' "$0"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --kernel) [ $# -ge 2 ] || die "--kernel needs a value"; kver=$2; shift 2 ;;
    --kernel=*) kver=${1#*=}; shift ;;
    --runs) [ $# -ge 2 ] || die "--runs needs a value"; runs=$2; shift 2 ;;
    --runs=*) runs=${1#*=}; shift ;;
    --timeout) [ $# -ge 2 ] || die "--timeout needs a value"; timeout=$2; shift 2 ;;
    --timeout=*) timeout=${1#*=}; shift ;;
    --retries) [ $# -ge 2 ] || die "--retries needs a value"; retries=$2; shift 2 ;;
    --retries=*) retries=${1#*=}; shift ;;
    --svg) [ $# -ge 2 ] || die "--svg needs a directory"; svgdir=$2; shift 2 ;;
    --svg=*) svgdir=${1#*=}; shift ;;
    --slow-root) [ $# -ge 2 ] || die "--slow-root needs seconds"; slow=$2; shift 2 ;;
    --slow-root=*) slow=${1#*=}; shift ;;
    --json) json=1; shift ;;
    --keep) keep=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument '$1'" ;;
  esac
done
[[ $runs =~ ^[1-9][0-9]*$ ]] || die "--runs '$runs': want a positive number"
[[ $timeout =~ ^[1-9][0-9]*$ ]] || die "--timeout '$timeout': want seconds"
[[ $retries =~ ^[0-9]+$ ]] || die "--retries '$retries': want a number"
[ -z "$slow" ] || [[ $slow =~ ^[1-9][0-9]*$ ]] || die "--slow-root '$slow': want whole seconds"
[ "$(id -u)" = 0 ] || die "run as root: mkinitramfs runs in a private mount namespace, and missing packages are installed with apt-get"
for b in kpreload kpreload-init kpreload-rootinit; do
  [ -x "$top/bin/$b" ] || die "$top/bin/$b is not built: run make build"
done

t0=$(date +%s%N)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
log "bench-boot: kernel $kver, $runs runs per variant${slow:+, and each with the root plugged in ${slow} s after QEMU starts}, load average $load_start, $(nproc) CPUs"

ensure_packages "${MKINITRAMFS_PACKAGES[@]}"

"$here/kernels.sh" "$kver"
ktree="$KPRELOAD_CACHE/kernels/$kver"
vmlinuz="$ktree/boot/vmlinuz-$kver"
[ -f "$ktree/boot/config-$kver" ] || die "no $ktree/boot/config-$kver (mkinitramfs needs the kernel's config)"
libdir=$(readlink -f /lib)   # /usr/lib on a merged-/usr system
[ -d /boot ] || die "/boot does not exist on this host (mkinitramfs reads /boot/config-<kver>)"

work=$(mktemp -d /var/tmp/kpreload-bench.XXXXXX)
ok=0
finish() {
  if [ "$ok" = 1 ] && [ "$keep" = 0 ]; then
    rm -rf "$work"
  else
    log "work files kept in $work"
  fi
}
trap finish EXIT
mkdir -p "$work/logs" "$work/boots" "$work/tmp" "$work/debian/upper" "$work/debian/ovl" "$work/bin"
# Private copies of the binaries: a `make build` elsewhere during the run must not
# change what is measured (kpreload initramfs takes kpreload-init from beside itself).
cp "$top/bin/kpreload" "$top/bin/kpreload-init" "$top/bin/kpreload-rootinit" "$work/bin/"
kp="$work/bin/kpreload"
samples="$work/samples.jsonl"
: >"$samples"

# fail MSG LOG: die with the tail of a log.
fail() { [ -f "$2" ] && tail -n 25 "$2" >&2; die "$1 (log: $2)"; }
# seconds START_NS END_NS
seconds() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'; }

log "building the benchmark helper"
bb="$work/benchboot"
(cd "$top" && go build -o "$bb" ./cmd/benchboot) || die "go build ./cmd/benchboot failed"

log "building the test driver with dkms"
"$here/build-testdriver.sh" "$kver" "$work/edu" >"$work/logs/testdriver.log" 2>&1 || fail "test driver build failed" "$work/logs/testdriver.log"
edu="$work/edu/kpreload_edu.ko"
[ -f "$edu" ] || die "build-testdriver.sh made no $edu"

log "kpreload: adding the test driver to a module cache"
"$kp" cache add --cache "$work/cache" --driver kpreload-edu --version 1.0.0 "$edu" >"$work/logs/cache.log" 2>&1 ||
  fail "kpreload cache add failed" "$work/logs/cache.log"

log "building the root disk"
uuid=5f1d2c3b-8a9e-4f70-b6d5-4c3b2a190807
"$kp" rootdisk -o "$work/root.img" --uuid "$uuid" >"$work/logs/rootdisk.log" 2>&1 || fail "kpreload rootdisk failed" "$work/logs/rootdisk.log"

# in_debian_ns (lib.sh) runs mkinitramfs over the unpacked kernel in a private mount
# namespace; its wall time in ms goes to $work/debian/elapsed_ms.
export BENCH_KTREE=$ktree BENCH_LIBDIR=$libdir BENCH_UPPER=$work/debian/upper BENCH_OVL=$work/debian/ovl \
  BENCH_ELAPSED=$work/debian/elapsed_ms

log "Debian: installing the test driver the way dkms does (updates/dkms + depmod), in the overlay"
in_debian_ns bash -c "install -D -m 644 '$edu' /lib/modules/$kver/updates/dkms/kpreload_edu.ko &&
  depmod -a $kver && modprobe -S $kver --show-depends kpreload_edu" >"$work/logs/dkms-install.log" 2>&1 ||
  fail "installing the test driver in the overlay failed" "$work/logs/dkms-install.log"
grep -q "updates/dkms/kpreload_edu.ko" "$work/logs/dkms-install.log" ||
  fail "modprobe does not resolve kpreload_edu to updates/dkms" "$work/logs/dkms-install.log"
cp -a /etc/initramfs-tools "$work/debian/conf"
echo "MODULES=most" >>"$work/debian/conf/initramfs.conf"
echo "kpreload_edu" >>"$work/debian/conf/modules"
deb_conf=$(. "$work/debian/conf/initramfs.conf"; echo "MODULES=$MODULES, COMPRESS=${COMPRESS:-}, BUSYBOX=${BUSYBOX:-}")

declare -A initrd=([debian]="$work/debian.img" [kpreload]="$work/kpreload.img" [kpreload-early]="$work/kpreload-early.img")
# order I: every variant, rotating which goes first from run to run.
order() {
  case $(($1 % 3)) in
    1) echo debian kpreload kpreload-early ;;
    2) echo kpreload kpreload-early debian ;;
    *) echo kpreload-early debian kpreload ;;
  esac
}

for i in $(seq 1 "$runs"); do
  for v in $(order "$i"); do
    lg="$work/logs/build-$v-$i.log"
    case $v in
      debian)
        TMPDIR="$work/tmp" in_debian_ns mkinitramfs -d "$work/debian/conf" -o "${initrd[$v]}" "$kver" >"$lg" 2>&1 ||
          fail "mkinitramfs failed" "$lg"
        secs=$(awk -v ms="$(cat "$work/debian/elapsed_ms")" 'BEGIN { printf "%.3f", ms / 1000 }')
        what=mkinitramfs ;;
      kpreload|kpreload-early)
        complete=()
        [ "$v" = kpreload-early ] && complete=(--complete)
        s=$(date +%s%N)
        "$kp" initramfs --kernel "$kver" --root "$ktree" --cache "$work/cache" --filesystems ext4 "${complete[@]}" -o "${initrd[$v]}" >"$lg" 2>&1 ||
          fail "kpreload initramfs failed" "$lg"
        secs=$(seconds "$s" "$(date +%s%N)")
        what="kpreload initramfs ${complete[*]}" ;;
    esac
    bytes=$(stat -c %s "${initrd[$v]}")
    printf '{"kind":"build","variant":"%s","run":%d,"wall":%s,"bytes":%d}\n' "$v" "$i" "$secs" "$bytes" >>"$samples"
    log "build $i/$runs $v: $what took $secs s, $bytes bytes"
  done
done

# The Debian image must carry the test driver and load it with udev.
lsinitramfs "${initrd[debian]}" >"$work/logs/debian-contents.txt"
grep -q 'updates/dkms/kpreload_edu.ko$' "$work/logs/debian-contents.txt" || die "Debian's initrd lacks updates/dkms/kpreload_edu.ko"
deb_mods=$(grep -c '\.ko$' "$work/logs/debian-contents.txt" || true)
deb_fsck=no
grep -q 'sbin/fsck' "$work/logs/debian-contents.txt" && deb_fsck=yes
kp_mods=$(sed -n 's/.* \([0-9]*\) modules, .*/\1/p' "$work/logs/build-kpreload-$runs.log")

# boots I: order I's boots, each variant's slow-root boot (VARIANT+slow) after it.
boots() {
  local v
  for v in $(order "$1"); do
    echo "$v"
    [ -z "$slow" ] || echo "$v+slow"
  done
}

hung=0
for i in $(seq 1 "$runs"); do
  for b in $(boots "$i"); do
    v=${b%+slow}
    late=() slow_arg=(-slow-root 0) slow_s=0
    if [ "$b" != "$v" ]; then
      late=(--root-late "${slow}s") slow_arg=(-slow-root "$slow") slow_s=$slow
    fi
    for try in $(seq 0 "$retries"); do
      base="$work/boots/$b-$i"
      [ "$try" = 0 ] || base="$base.retry$try"
      disk="$base.root.img"
      cp --sparse=always "$work/root.img" "$disk"   # a pristine disk for every boot
      note=""
      [ "$try" = 0 ] || note=" (again, after a hang)"
      log "boot $i/$runs $b$note"
      "$kp" boot --kernel "$vmlinuz" --initramfs "${initrd[$v]}" --root-disk "$disk" "${late[@]}" --device edu \
        --append "root=UUID=$uuid" --accel tcg --cpus 2 --memory 1024 --timeout "${timeout}s" \
        --console "$base.console" --json >"$base.json" 2>"$base.stderr" || true
      rm -f "$disk"
      rc=0
      "$bb" sample -variant "$v" "${slow_arg[@]}" -run "$i" -kernel "$kver" -boot "$base.json" -console "$base.console" >>"$samples" || rc=$?
      [ "$rc" = 0 ] && break
      [ "$rc" = 3 ] || fail "$b boot $i did not reach the root disk's init with edu bound" "$base.stderr"
      # A hang (QEMU killed at the timeout): count it, keep its logs, run it again.
      hung=$((hung + 1))
      printf '{"kind":"hung","variant":"%s","run":%d,"wall":%s,"slow_root":%s}\n' "$v" "$i" "$timeout" "$slow_s" >>"$samples"
      warn "$b boot $i hung (console $base.console)"
      [ "$try" -lt "$retries" ] || die "$b boot $i hung $((retries + 1)) times in a row (console $base.console)"
    done
  done
done

if [ -n "$svgdir" ]; then
  mkdir -p "$svgdir"
  for i in $(seq 1 "$runs"); do
    svg_args=()
    for v in debian kpreload kpreload-early; do
      base="$work/boots/$v-$i"
      last=""
      for r in "$base".retry*.json; do [ -f "$r" ] && last=${r%.json}; done   # the boot that counted (retries < 10)
      [ -n "$last" ] && base=$last
      svg_args+=(-boot "$v=$base.json,$base.console")
    done
    "$bb" svg -o "$svgdir/round-$i.svg" -kernel "$kver" -round "$i" "${svg_args[@]}" >&2 || die "drawing round $i failed"
  done
fi

load_end=$(cut -d' ' -f1-3 /proc/loadavg)
total=$(seconds "$t0" "$(date +%s%N)")
report_args=(-samples "$samples" -kernel "$kver" -runs "$runs" -nproc "$(nproc)" -accel tcg -guest-cpus 2 -guest-memory 1024
  -qemu "$(qemu-system-x86_64 --version | sed -n '1s/^QEMU emulator version \([^ ]*\).*/\1/p')"
  -load-start "$load_start" -load-end "$load_end" -seconds "$total"
  -mkinitramfs "mkinitramfs from initramfs-tools $(dpkg-query -W -f='${Version}' initramfs-tools-core), $deb_conf, $deb_mods modules, fsck in initrd: $deb_fsck"
  -kpreload-version "kpreload $(git -C "$top" describe --always --dirty 2>/dev/null || echo unknown), $kp_mods modules, zstd")
[ "$json" = 1 ] && report_args+=(-json)
"$bb" report "${report_args[@]}"
ok=1
if [ "$hung" -gt 0 ]; then
  keep=1
  warn "$hung boot(s) hung and were run again; their consoles are kept under $work/boots"
fi
log "done in $total s"
