#!/usr/bin/env bash
# bench-nvidia.sh: the real driver's path. Kernel start -> NVIDIA's kernel module has run
# its init ("NVRM: No NVIDIA GPU found.": QEMU has no GPU, so the init then fails with
# ENODEV), with kpreload in several layouts against Debian's own way, on the same kernel,
# root disk and QEMU, measured in one run.
#
#   scripts/bench-nvidia.sh [--kernel KVER] [--recipe R] [--runs N] [--slow-root S] [--keep] [--timeout S]
#
#   --kernel KVER  default 6.12.117+deb12-cloud-amd64 (its modules are .ko.xz and it
#                  decompresses them itself: CONFIG_MODULE_DECOMPRESS, XZ)
#   --recipe R     default nvidia-550-open (built with the real dkms into
#                  $KPRELOAD_CACHE/store if that cell is not there yet: minutes)
#   --runs N       boots per variant (default 3); medians are reported
#   --slow-root S  also boot, in the same rounds, the early layout, the set in the
#                  initramfs with the decision after the root, the root cache (zstd)
#                  and Debian with the root disk plugged in S seconds after QEMU
#                  starts (kpreload boot --root-late: PCIe hotplug through QEMU's
#                  monitor), as a cloud volume that appears while the machine boots
#
# Variants (each boots the same ext4 root disk whose /sbin/init is kpreload-rootinit):
#   kpreload, initramfs, early  the set in the initramfs (zstd, as images store it on
#                               Debian's kernels), index marked complete: /init decides
#                               and loads while it finds the root (kpreload.load= modules
#                               too, before the root)
#   kpreload, initramfs, after  (with --slow-root) the same initramfs without --complete:
#                               /init decides and loads after the root mount
#   kpreload, root cache, xz    the set on the root's module cache, xz-compressed as the
#                               kernel's own modules (a kernel that decompresses them
#                               itself gets them as they are: MODULE_INIT_COMPRESSED_FILE)
#   kpreload, root cache, plain the same modules decompressed (.ko)
#   kpreload, root cache, zstd  recompressed with zstd (this kernel only decompresses xz:
#                               /init decompresses in userspace)
#   Debian                      the modules installed where dkms installs them
#                               (updates/dkms, xz-compressed as dkms compresses them for
#                               this kernel, depmod), "nvidia" in initramfs-tools' modules
#                               list, mkinitramfs; the initramfs's modprobe loads it
#                               (Debian's earliest way; udev would only load it for a GPU)
# The table gives, for each, kernel start -> NVIDIA's init, -> root mounted (ext4's
# "mounted filesystem" line for vda) and whether NVIDIA's init ran before the root was mounted.
# kpreload boots get kpreload.load=nvidia (no GPU, so no device would ask for it). Every
# mkinitramfs runs in a private mount namespace over the unpacked kernel (scripts/lib.sh
# in_debian_ns): the host is left as it was. Progress to stderr, the table to stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
top=$(cd "$here/.." && pwd)

kver=6.12.117+deb12-cloud-amd64
recipe=nvidia-550-open
runs=3
keep=0
timeout=180
slow=""
while [ $# -gt 0 ]; do
  case "$1" in
    --kernel) kver=$2; shift 2 ;;
    --recipe) recipe=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --slow-root) slow=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
[[ $runs =~ ^[1-9][0-9]*$ ]] || die "--runs '$runs': want a positive number"
[ -z "$slow" ] || [[ $slow =~ ^[1-9][0-9]*$ ]] || die "--slow-root '$slow': want whole seconds"
[ "$(id -u)" = 0 ] || die "run as root: mkinitramfs runs in a private mount namespace"
for b in kpreload kpreload-init kpreload-rootinit; do
  [ -x "$top/bin/$b" ] || die "$top/bin/$b is not built: run make build"
done
for tool in jq xz zstd; do command -v "$tool" >/dev/null || die "$tool is missing: run scripts/deps.sh"; done

t0=$(date +%s%N)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
ensure_packages "${MKINITRAMFS_PACKAGES[@]}"
"$here/kernels.sh" "$kver" >&2
ktree="$KPRELOAD_CACHE/kernels/$kver"
vmlinuz="$ktree/boot/vmlinuz-$kver"
libdir=$(readlink -f /lib)

work=$(mktemp -d /var/tmp/kpreload-bench-nvidia.XXXXXX)
ok=0
finish() { if [ "$ok" = 1 ] && [ "$keep" = 0 ]; then rm -rf "$work"; else log "work files kept in $work"; fi; }
trap finish EXIT
mkdir -p "$work/logs" "$work/boots" "$work/tmp" "$work/debian/upper" "$work/debian/ovl" "$work/bin" "$work/mods"
cp "$top/bin/kpreload" "$top/bin/kpreload-init" "$top/bin/kpreload-rootinit" "$work/bin/"
kp="$work/bin/kpreload"
fail() { [ -f "$2" ] && tail -n 25 "$2" >&2; die "$1 (log: $2)"; }

nvidia_cell "$kp" "$recipe" "$kver" "$work"
driver=$NVIDIA_DRIVER version=$NVIDIA_VERSION flavor=$NVIDIA_FLAVOR set_id=$NVIDIA_SET
# The module files plain, xz-compressed as the kernel's own are and zstd-compressed.
nvidia_forms "$kp" "$work" xz plain zstd

uuid=5f1d2c3b-8a9e-4f70-b6d5-4c3b2a190807
log "root disks and initramfs images"
"$kp" rootdisk -o "$work/root-none.img" --uuid "$uuid" >"$work/logs/rootdisk.log" 2>&1 || fail "rootdisk failed" "$work/logs/rootdisk.log"
for c in xz plain zstd; do
  "$kp" rootdisk -o "$work/root-$c.img" --uuid "$uuid" --add "/var/lib/kpreload/cache=$work/cache-$c" >"$work/logs/rootdisk-$c.log" 2>&1 ||
    fail "rootdisk ($c) failed" "$work/logs/rootdisk-$c.log"
done
"$kp" initramfs --kernel "$kver" --root "$ktree" -o "$work/kp-plain.img" >"$work/logs/initramfs.log" 2>&1 ||
  fail "kpreload initramfs failed" "$work/logs/initramfs.log"
# Who decompresses xz (the root cache's xz row): the kernel (MODULE_DECOMPRESS, built
# for xz) or /init. The initramfs carries zstd, as images store sets on Debian's kernels.
kconfig="$ktree/boot/config-$kver"
initc=zstd xzwho="userspace decompression: this kernel decompresses no xz"
if grep -q '^CONFIG_MODULE_DECOMPRESS=y' "$kconfig" && grep -q '^CONFIG_MODULE_COMPRESS_XZ=y' "$kconfig"; then
  xzwho="in-kernel decompression"
fi
"$kp" initramfs --kernel "$kver" --root "$ktree" --cache "$work/cache-$initc" --complete -o "$work/kp-early.img" >"$work/logs/initramfs-early.log" 2>&1 ||
  fail "kpreload initramfs --complete failed" "$work/logs/initramfs-early.log"
if [ -n "$slow" ]; then
  "$kp" initramfs --kernel "$kver" --root "$ktree" --cache "$work/cache-$initc" -o "$work/kp-after.img" >"$work/logs/initramfs-after.log" 2>&1 ||
    fail "kpreload initramfs (the set, decision after the root) failed" "$work/logs/initramfs-after.log"
fi

export BENCH_KTREE=$ktree BENCH_LIBDIR=$libdir BENCH_UPPER=$work/debian/upper BENCH_OVL=$work/debian/ovl
log "Debian: the modules installed as dkms installs them (updates/dkms + depmod), nvidia in the initramfs modules list"
mkdir -p "$work/debian/conf"
cp -r /etc/initramfs-tools/. "$work/debian/conf/"
sed -i 's/^MODULES=.*/MODULES=most/' "$work/debian/conf/initramfs.conf"
echo "$driver" >>"$work/debian/conf/modules"
in_debian_ns bash -c "install -d /lib/modules/$kver/updates/dkms && cp '$work/mods/xz'/* /lib/modules/$kver/updates/dkms/ &&
  depmod -a $kver && modprobe -S $kver --show-depends $driver" >"$work/logs/dkms-install.log" 2>&1 ||
  fail "installing the modules in the overlay failed" "$work/logs/dkms-install.log"
TMPDIR="$work/tmp" in_debian_ns mkinitramfs -d "$work/debian/conf" -o "$work/debian.img" "$kver" >"$work/logs/mkinitramfs.log" 2>&1 ||
  fail "mkinitramfs failed" "$work/logs/mkinitramfs.log"
lsinitramfs "$work/debian.img" >"$work/logs/debian-contents.txt"
grep -q "updates/dkms/$driver.ko" "$work/logs/debian-contents.txt" || die "Debian's initrd lacks updates/dkms/$driver.ko*"

variants=(early root-xz root-plain root-zstd debian)
[ -z "$slow" ] || variants+=(early+slow after+slow root-zstd+slow debian+slow)
declare -A initrd=([early]=$work/kp-early.img [after]=$work/kp-after.img [root-xz]=$work/kp-plain.img [root-plain]=$work/kp-plain.img [root-zstd]=$work/kp-plain.img [debian]=$work/debian.img)
declare -A disk=([early]=$work/root-none.img [after]=$work/root-none.img [root-xz]=$work/root-xz.img [root-plain]=$work/root-plain.img [root-zstd]=$work/root-zstd.img [debian]=$work/root-none.img)
declare -A label=([early]="kpreload, set in the initramfs ($initc), early decision" [after]="kpreload, set in the initramfs ($initc), decision after the root"
  [root-xz]="kpreload, set on the root cache, xz ($xzwho)"
  [root-plain]="kpreload, set on the root cache, plain .ko" [root-zstd]="kpreload, set on the root cache, zstd (userspace decompression on this kernel)"
  [debian]="Debian: dkms-installed modules, modprobe in mkinitramfs's initrd")
for v in early after root-zstd debian; do label[$v+slow]="${label[$v]}; root plugged in ${slow} s after QEMU starts"; done
samples="$work/samples.txt"
: >"$samples"
for i in $(seq 1 "$runs"); do
  # Rotate the order from run to run.
  for j in $(seq 0 $((${#variants[@]} - 1))); do
    b=${variants[$(( (j + i) % ${#variants[@]} ))]}
    v=${b%+slow}
    late=()
    [ "$b" = "$v" ] || late=(--root-late "${slow}s")
    base="$work/boots/$b-$i"
    cp --sparse=always "${disk[$v]}" "$base.root.img"
    log "boot $i/$runs $b"
    "$kp" boot --kernel "$vmlinuz" --initramfs "${initrd[$v]}" --root-disk "$base.root.img" "${late[@]}" \
      --append "root=UUID=$uuid kpreload.load=$driver" --accel tcg --cpus 2 --memory 2048 --timeout "${timeout}s" \
      --console "$base.console" --json >"$base.json" 2>"$base.stderr" || true
    rm -f "$base.root.img"
    nvrm=$(sed -n 's/^\[ *\([0-9.]*\)\] NVRM: No NVIDIA GPU found.*/\1/p' "$base.console" | head -n1)
    init=$(sed -n 's/^\[ *\([0-9.]*\)\] .*Run \/init as init process.*/\1/p' "$base.console" | head -n1)
    mounted=$(sed -n 's/^.*\[ *\([0-9.]*\)\] EXT4-fs (vda): mounted filesystem.*/\1/p' "$base.console" | head -n1)
    real=$(jq -r '.rootinit.start // empty' "$base.json")
    plugged=$(jq -r '.root_plugged_seconds // 0' "$base.json")
    [ -n "$nvrm" ] || fail "$b boot $i: no \"NVRM: No NVIDIA GPU found\" line: the module's init never ran" "$base.console"
    [ -n "$real" ] || fail "$b boot $i did not reach the root disk's init" "$base.stderr"
    [ -n "$mounted" ] || fail "$b boot $i: no \"EXT4-fs (vda): mounted filesystem\" line" "$base.console"
    [ "$b" = "$v" ] || awk -v p="$plugged" -v s="$slow" 'BEGIN { exit !(p >= s) }' || fail "$b boot $i: the root disk was plugged in at ${plugged}s, want ${slow}s" "$base.stderr"
    echo "$b $i $nvrm $init $real $mounted" >>"$samples"
    log "  $b: /init at ${init}s, NVRM line at ${nvrm}s, root mounted at ${mounted}s, real init at ${real}s"
  done
done

median() { sort -n | awk '{a[NR]=$1} END { if (NR % 2) printf "%.3f", a[(NR+1)/2]; else printf "%.3f", (a[NR/2]+a[NR/2+1])/2 }'; }
deb_nvrm=$(awk '$1=="debian"{print $3}' "$samples" | median)
deb_real=$(awk '$1=="debian"{print $5}' "$samples" | median)
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
total=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.0f", (b - a) / 1e9 }')
echo "NVIDIA driver benchmark: $driver $version $flavor (set ${set_id:0:12}) on $kver, QEMU tcg (2 vCPUs, 2 GiB, no GPU), median of $runs boots per variant, interleaved"
echo
echo "| variant | kernel start → nvidia init ran (NVRM line) | ratio to Debian | kernel start → real init | ratio to Debian | kernel start → root mounted | NVRM line before the root was mounted | samples (NVRM line) |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
for v in "${variants[@]}"; do
  n=$(awk -v v="$v" '$1==v{print $3}' "$samples" | median)
  r=$(awk -v v="$v" '$1==v{print $5}' "$samples" | median)
  m=$(awk -v v="$v" '$1==v{print $6}' "$samples" | median)
  before=$(awk -v v="$v" '$1==v{n++; if ($3 < $6) k++} END {printf "%d of %d", k, n}' "$samples")
  s=$(awk -v v="$v" '$1==v{printf "%s%s", sep, $3; sep=", "}' "$samples")
  echo "| ${label[$v]} | $n s | $(awk -v a="$n" -v b="$deb_nvrm" 'BEGIN{printf "%.2f", a/b}') | $r s | $(awk -v a="$r" -v b="$deb_real" 'BEGIN{printf "%.2f", a/b}') | $m s | $before | $s |"
done
echo
if [ -n "$slow" ]; then
  # Round by round, the early layout against the others with the same late root.
  for o in after root-zstd; do
    d=$(awk -v o="$o+slow" '$1=="early+slow"{e[$2]=$3} $1==o{a[$2]=$3} END {for (r in e) if (r in a) printf "%s%+.3f", (n++ ? ", " : ""), e[r]-a[r]}' "$samples")
    r=$(awk -v o="$o+slow" '$1=="early+slow"{e[$2]=$5-$6} $1==o{a[$2]=$5-$6} END {for (r in e) if (r in a) printf "%s%+.3f", (n++ ? ", " : ""), e[r]-a[r]}' "$samples")
    echo "Slow root, early − ${label[$o]}, round by round: NVRM line $d s; root mounted → real init $r s."
  done
  echo "Slow root, early decision: NVRM line before the root was mounted in $(awk '$1=="early+slow"{n++; if ($3 < $6) k++} END {printf "%d of %d", k, n}' "$samples") boots."
  echo
fi
echo "Host: $(nproc) CPUs, load average $load_start at the start, $load_end at the end; whole run $total s. Initramfs sizes: kpreload $(stat -c %s "$work/kp-plain.img") B, kpreload with the set $(stat -c %s "$work/kp-early.img") B, Debian $(stat -c %s "$work/debian.img") B."
ok=1
