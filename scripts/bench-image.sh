#!/usr/bin/env bash
# bench-image.sh: `packer build` of images/ci-testdriver.pkr.hcl with the real Packer and the
# kpreload plugin, cold and warm, the image's size, and its boot timeline (kernel start ->
# test driver bound -> default target) against the same disk booted with Debian's own
# initramfs and against the template's GRUB, Secure Boot and cloud-init (NoCloud seed)
# images, measured in one run under QEMU TCG with -device edu.
#
#   scripts/bench-image.sh [--runs N] [--kernel KVER] [--keep] [--timeout S] [--dib]
#
#   --runs N      warm builds and boots per variant (default 3); medians are reported
#   --kernel KVER the image's kernel (default 6.1.0-56-cloud-amd64)
#   --keep        keep the work directory (always kept when something fails)
#   --timeout S   give up on one boot after S seconds (default 480)
#   --dib         only the row against diskimage-builder (below), alone
#
# Builds (wall time of the whole `packer build`, plugin start to artifact):
#   cold: empty module cache (the real dkms builds the test driver) and empty rootfs cache
#         (mmdebstrap runs against the Debian archive);
#   warm: the same template again with -force into the same output directory, both caches
#         kept (what a CI rebuild of an unchanged image costs);
#   then one build each of the GRUB, Secure Boot and cloud-init images booted below (the
#         template's bootloader, secure_boot, recipes_dir and cloud_init variables).
# Boots (every boot on a fresh qcow2 overlay of the warm build's image, QEMU TCG, 2 vCPUs,
# 1 GiB, -device edu; times are the kernel's printk clock, so firmware does not count):
#   kpreload: the image as built, through OVMF and its systemd-boot entry; kpreload's /init
#             loads kpreload_edu from the image's module cache before switch_root.
#   debian:   the same disk, its kernel booted directly with an initramfs made by Debian's
#             mkinitramfs (initramfs-tools, MODULES=most) for that kernel, with the test
#             driver installed the way dkms does (updates/dkms + depmod) and listed in the
#             initramfs modules file, so Debian's initramfs loads it before /sbin/init too.
#             mkinitramfs runs in a private mount namespace over the unpacked kernel, as in
#             scripts/bench-boot.sh: nothing on the host changes.
#   grub bios, grub uefi: the same template with bootloader = "grub" (one disk for BIOS and
#             UEFI, kpreload's entry first in grub.cfg), booted through SeaBIOS and through
#             OVMF; ratios are to the systemd-boot image's boot of the same run.
#   grub secure boot: the same template with bootloader = "grub", secure_boot = true and
#             recipes_dir = a copy of recipes/testdriver* whose recipe signs the module
#             (`signing:` with a key made here by openssl; a new cell, built by dkms), booted
#             through OVMF's Secure Boot firmware (q35 smm=on, secure pflash,
#             OVMF_CODE_4M.secboot.fd) with a copy of the build's <name>.ovmf-vars.fd
#             (Microsoft's keys, the module key as a MOK); the boot must report Secure Boot on.
#   nocloud:  the same template with cloud_init = true (systemd-boot), booted through OVMF
#             with a NoCloud seed on virtio (vfat labelled CIDATA: a #cloud-config whose
#             write_files entry for /etc/kpreload/instance.yaml asks for the test driver
#             1.0.0, and meta-data instance-id:
#             bench-N) and a user-mode network (restrict=on; without one cloud-init waits
#             for systemd-networkd-wait-online); /init must take the request from the seed.
#             Ratios of both are to the systemd-boot image's boot of the same run.
# Install per kernel: what the kernel packages run when a kernel arrives, on the same kernel:
#   `kpreload kernel-hook postinst` (the kpreload initramfs and the boot entry, here
#   systemd-boot's on a scratch root) against Debian's mkinitramfs (update-initramfs's work).
# Against diskimage-builder (also alone, --dib): the same image, a bookworm raw disk with Debian's
#   generic kernel (the linux-image-KVER that DIB's debian-minimal installs through
#   linux-image-amd64), openssh-server and sudo, GRUB, built by `kpreload image build` (the CLI:
#   --kernel KVER --package openssh-server --package sudo --bootloader grub --format raw --size
#   2048) and by disk-image-create (elements vm debian-minimal devuser openssh-server, the
#   filesystem on the whole disk as testsupport/dibtest/block-device.yaml says, the
#   security archive from deb.debian.org's mirror, --no-tmpfs: as builder/adopt's test runs it);
#   DIB first (its image names the kernel), then kpreload, cold (DIB's image cache and kpreload's
#   rootfs cache in new empty directories) and warm (both kept: DIB's debootstrap tarball, with
#   DIB_DEBOOTSTRAP_CACHE and DIB_DEBIAN_USE_DEBOOTSTRAP_CACHE, and its apt cache; kpreload's
#   mmdebstrap tarball); wall seconds, apparent and allocated size of each raw disk, ratios.
# Both images get systemd.log_target=kmsg printk.devkmsg=on so that systemd's "Reached target"
# lands in the kernel log with a timestamp. Needs root; installs Packer with scripts/packer.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
top=$(cd "$here/.." && pwd)

kver=6.1.0-56-cloud-amd64
runs=3
keep=0
timeout=480
usage() { sed -n '2,14s/^# \{0,1\}//p' "$0"; }
dib_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) [ $# -ge 2 ] || die "--runs needs a value"; runs=$2; shift 2 ;;
    --kernel) [ $# -ge 2 ] || die "--kernel needs a value"; kver=$2; shift 2 ;;
    --timeout) [ $# -ge 2 ] || die "--timeout needs a value"; timeout=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --dib) dib_only=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument '$1'" ;;
  esac
done
[[ $runs =~ ^[1-9][0-9]*$ ]] || die "--runs '$runs': want a positive number"
[ "$(id -u)" = 0 ] || die "run as root (mmdebstrap, mount namespaces for mkinitramfs)"

now() { date +%s%N; }
seconds() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'; }
fail() { [ -f "$2" ] && tail -n 25 "$2" >&2; die "$1 (log: $2)"; }

# versus DIR: the same image built by disk-image-create and by kpreload image build, cold then
# warm, into DIR; appends "versus" samples to $samples. Needs $work/plugins/kpreload{,-init}.
versus() {
  local d=$1 block="$top/testsupport/dibtest/block-device.yaml" kernel="" phase s secs img
  command -v disk-image-create >/dev/null || die "no disk-image-create: scripts/deps.sh installs python3-diskimage-builder"
  command -v debugfs >/dev/null || die "no debugfs (e2fsprogs)"
  mkdir -p "$d/dib-cache" "$d/rootfs" "$d/cache" "$d/logs"
  local dibenv=(DIB_RELEASE=bookworm DIB_DEBIAN_SECURITY_MIRROR=http://deb.debian.org/debian-security
    DIB_DEBIAN_SECURITY_SUBPATH=-security DIB_DEV_USER_USERNAME=devuser DIB_DEV_USER_PWDLESS_SUDO=yes
    DIB_DEV_USER_PASSWORD=devuser "DIB_BLOCK_DEVICE_CONFIG=file://$block" "DIB_IMAGE_CACHE=$d/dib-cache"
    DIB_DEBOOTSTRAP_CACHE=1 DIB_DEBIAN_USE_DEBOOTSTRAP_CACHE=1)
  versus_sample() { # versus_sample NAME PHASE SECONDS IMG: one versus sample
    printf '{"kind":"versus","name":"%s","phase":"%s","seconds":%s,"bytes":%d,"allocated":%d}\n' \
      "$1" "$2" "$3" "$(stat -c %s "$4")" "$(( $(stat -c %b "$4") * $(stat -c %B "$4") ))" >>"$samples"
  }
  for phase in cold warm; do
    log "disk-image-create, $phase"
    mkdir -p "$d/dib-$phase"
    s=$(now)
    (cd "$d/dib-$phase" && env "${dibenv[@]}" disk-image-create --no-tmpfs -t raw -o "$d/dib-$phase/debian" \
      vm debian-minimal devuser openssh-server) >"$d/logs/dib-$phase.log" 2>&1 ||
      fail "disk-image-create ($phase) failed" "$d/logs/dib-$phase.log"
    secs=$(seconds "$s" "$(now)")
    img="$d/dib-$phase/debian.raw"
    [ -f "$img" ] || die "disk-image-create wrote no $img"
    if [ -z "$kernel" ]; then
      # The one kernel in DIB's /boot (the filesystem is the whole disk): kpreload's image gets it too.
      kernel=$(debugfs -R 'ls /boot' "$img" 2>/dev/null | tr -s ' ' '\n' | grep -E '^vmlinuz-[^ ]+-amd64$' | sort -u | head -n1) ||
        die "no kernel in $img's /boot"
      kernel=${kernel#vmlinuz-}
      [ -n "$kernel" ] || die "no kernel in $img's /boot"
      log "DIB's kernel: $kernel"
    fi
    versus_sample "disk-image-create" "$phase" "$secs" "$img"
    log "disk-image-create, $phase: $secs s"
    log "kpreload image build, $phase"
    s=$(now)
    "$work/plugins/kpreload" image build --name debian --kernel "$kernel" --package openssh-server --package sudo \
      --bootloader grub --format raw --size 2048 --out "$d/kpreload-$phase" --cache "$d/cache" --rootfs-cache "$d/rootfs" \
      --init "$work/plugins/kpreload-init" >"$d/logs/kpreload-$phase.log" 2>&1 ||
      fail "kpreload image build ($phase) failed" "$d/logs/kpreload-$phase.log"
    secs=$(seconds "$s" "$(now)")
    versus_sample "kpreload image build" "$phase" "$secs" "$d/kpreload-$phase/debian.raw"
    log "kpreload image build, $phase: $secs s"
    rm -f "$d/dib-$phase/debian.raw" "$d/kpreload-$phase/debian.raw"
  done
  versus_kernel=$kernel
}

if [ "$dib_only" = 1 ]; then
  work=$(mktemp -d /var/tmp/kpreload-bench-image.XXXXXX)
  ok=0
  trap '[ "$ok" = 1 ] && [ "$keep" = 0 ] && rm -rf "$work" || log "work files kept in $work"' EXIT
  mkdir -p "$work/plugins"
  samples="$work/samples.jsonl"
  : >"$samples"
  log "building the static kpreload CLI and /init"
  (
    cd "$top"
    CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$work/plugins/kpreload" ./cmd/kpreload
    CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$work/plugins/kpreload-init" ./cmd/kpreload-init
    go build -o "$work/benchimage" ./cmd/benchimage
  ) || die "go build failed"
  versus "$work/dib"
  echo "bench-image --dib: bookworm, kernel $versus_kernel, raw, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $(disk-image-create --version 2>/dev/null | sed 's/^/diskimage-builder /')"
  echo
  "$work/benchimage" table "$samples"
  ok=1
  exit 0
fi

# mkinitramfs and its dependencies (lib.sh), jq for the manifest.
ensure_packages "${MKINITRAMFS_PACKAGES[@]}" jq
# The Secure Boot and NoCloud variants: the module key, the OVMF variable store with a MOK
# (virt-fw-vars, bookworm-backports), the Secure Boot firmware, the seed disk.
ensure_packages openssl python3-virt-firmware ovmf dosfstools mtools

packer=$("$here/packer.sh" | tail -n1)
"$here/kernels.sh" "$kver"
ktree="$KPRELOAD_CACHE/kernels/$kver"
vmlinuz="$ktree/boot/vmlinuz-$kver"
libdir=$(readlink -f /lib)

work=$(mktemp -d /var/tmp/kpreload-bench-image.XXXXXX)
ok=0
finish() {
  if [ "$ok" = 1 ] && [ "$keep" = 0 ]; then rm -rf "$work"; else log "work files kept in $work"; fi
}
trap finish EXIT
mkdir -p "$work/plugins" "$work/logs" "$work/boots" "$work/tmp" "$work/debian/upper" "$work/debian/ovl"
samples="$work/samples.jsonl"
: >"$samples"

log "building the plugin, the static kpreload CLI and /init"
(
  cd "$top"
  go build -o "$work/plugins/packer-plugin-kpreload" ./cmd/packer-plugin-kpreload
  CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$work/plugins/kpreload" ./cmd/kpreload
  CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$work/plugins/kpreload-init" ./cmd/kpreload-init
  go build -o "$work/benchimage" ./cmd/benchimage
) || die "go build failed"
bi="$work/benchimage"
# Packer 1.11 and later load only installed plugins: install this one into the bench's own
# plugin directory; the installed copy is told where the static CLI and /init are.
export PACKER_PLUGIN_PATH="$work/packer/plugins" PACKER_CONFIG_DIR="$work/packer/config"
CHECKPOINT_DISABLE=1 "$packer" plugins install --path "$work/plugins/packer-plugin-kpreload" github.com/kpreload/kpreload >&2 ||
  die "packer plugins install failed"

extra="systemd.log_target=kmsg printk.devkmsg=on"
out="$work/out"
build() { # build NAME LABEL [BOOTLOADER [OUT [-var K=V]...]]: one packer build (forced), timed
  local name=$1 label=$2 lg="$work/logs/build-$1.log" s bl=${3:-systemd-boot} o=${4:-$out}
  shift $(($# < 4 ? $# : 4))
  s=$(now)
  (cd "$top" && CHECKPOINT_DISABLE=1 TMPDIR="$work/tmp" \
    "$packer" build -force -color=false \
    -var "kpreload_binary=$work/plugins/kpreload" -var "init_binary=$work/plugins/kpreload-init" \
    -var "output_directory=$o" -var "cache_dir=$work/cache" -var "rootfs_cache_dir=$work/rootfs" \
    -var "bootloader=$bl" -var "kernel=$kver" -var "extra_cmdline=$extra" "$@" images/ci-testdriver.pkr.hcl) >"$lg" 2>&1 ||
    fail "packer build ($name) failed" "$lg"
  secs=$(seconds "$s" "$(now)")
  printf '{"kind":"build","name":"%s","seconds":%s}\n' "$label" "$secs" >>"$samples"
  log "packer build $name: $secs s"
}
log "packer build, cold (empty module cache and rootfs cache)"
build cold "cold (empty caches)"
for i in $(seq 1 "$runs"); do
  build "warm-$i" "warm (caches kept)"
done
log "packer build of the GRUB image (bootloader = grub, caches kept)"
build grub "warm, GRUB (caches kept)" grub "$work/out-grub"
grub_qcow2="$work/out-grub/ci-testdriver.qcow2"

log "packer build of the Secure Boot image (grub, secure_boot = true, a signed copy of the test driver's recipe)"
sr="$work/signed-recipes"
mkdir -p "$sr" "$work/signing"
openssl req -new -x509 -newkey rsa:2048 -nodes -sha256 -days 2 -subj /CN=kpreload-bench \
  -keyout "$work/signing/key.pem" -out "$work/signing/cert.pem" >"$work/logs/openssl.log" 2>&1 ||
  fail "openssl req failed" "$work/logs/openssl.log"
cp -r "$top/recipes/testdriver.yaml" "$top/recipes/testdriver" "$top/recipes/testdriver-userspace" "$sr/"
printf 'signing:\n  key: %s\n  cert: %s\n' "$work/signing/key.pem" "$work/signing/cert.pem" >>"$sr/testdriver.yaml"
build grub-sb "GRUB, Secure Boot (signed cell built, caches kept)" grub "$work/out-grub-sb" \
  -var secure_boot=true -var "recipes_dir=$sr"
sb_qcow2="$work/out-grub-sb/ci-testdriver.qcow2"
sb_vars="$work/out-grub-sb/ci-testdriver.ovmf-vars.fd"
[ -f "$sb_vars" ] || die "the Secure Boot build wrote no $sb_vars"

log "packer build of the cloud-init image (cloud_init = true, systemd-boot)"
build cloud "warm, cloud-init (caches kept)" systemd-boot "$work/out-cloud" -var cloud_init=true
cloud_qcow2="$work/out-cloud/ci-testdriver.qcow2"
seed() { # seed DIR N: a NoCloud seed asking for the test driver 1.0.0, DIR/seed.img
  printf '#cloud-config\nwrite_files:\n  - path: /etc/kpreload/instance.yaml\n    content: |\n      resources:\n        driver:\n          version: "1.0.0"\n' >"$1/user-data"
  printf 'instance-id: bench-%s\n' "$2" >"$1/meta-data"
  rm -f "$1/seed.img"
  { mkfs.vfat -n CIDATA -C "$1/seed.img" 2048 && mcopy -i "$1/seed.img" "$1/user-data" "$1/meta-data" ::; } >"$1/seed.log" 2>&1 ||
    fail "making the NoCloud seed failed" "$1/seed.log"
}
raw="$out/ci-testdriver.raw"
qcow2="$out/ci-testdriver.qcow2"
manifest="$out/ci-testdriver.manifest.json"
uuid=$(jq -r .root_uuid "$manifest")
printf '{"kind":"size","name":"ci-testdriver.raw (apparent)","bytes":%d}\n' "$(stat -c %s "$raw")" >>"$samples"
printf '{"kind":"size","name":"ci-testdriver.raw (allocated)","bytes":%d}\n' "$(( $(stat -c %b "$raw") * $(stat -c %B "$raw") ))" >>"$samples"
printf '{"kind":"size","name":"ci-testdriver.qcow2","bytes":%d}\n' "$(stat -c %s "$qcow2")" >>"$samples"

log "Debian initramfs: test driver installed as dkms does, mkinitramfs MODULES=most"
"$here/build-testdriver.sh" "$kver" "$work/edu" >"$work/logs/testdriver.log" 2>&1 || fail "test driver build failed" "$work/logs/testdriver.log"
export BENCH_KTREE=$ktree BENCH_LIBDIR=$libdir BENCH_UPPER=$work/debian/upper BENCH_OVL=$work/debian/ovl  # for in_debian_ns (lib.sh)
in_debian_ns bash -c "install -D -m 644 '$work/edu/kpreload_edu.ko' /lib/modules/$kver/updates/dkms/kpreload_edu.ko && depmod -a $kver" \
  >"$work/logs/dkms-install.log" 2>&1 || fail "installing the test driver in the overlay failed" "$work/logs/dkms-install.log"
cp -a /etc/initramfs-tools "$work/debian/conf"
echo "MODULES=most" >>"$work/debian/conf/initramfs.conf"
echo "kpreload_edu" >>"$work/debian/conf/modules"
TMPDIR="$work/tmp" in_debian_ns mkinitramfs -d "$work/debian/conf" -o "$work/debian.img" "$kver" >"$work/logs/mkinitramfs.log" 2>&1 ||
  fail "mkinitramfs failed" "$work/logs/mkinitramfs.log"

log "install per kernel: kpreload kernel-hook postinst against mkinitramfs"
hr="$work/hookroot"
mkdir -p "$hr/boot/efi/loader" "$hr/lib/modules" "$hr/usr/lib/kpreload" "$hr/etc/kpreload"
cp "$vmlinuz" "$hr/boot/"
ln -s "$ktree/lib/modules/$kver" "$hr/lib/modules/$kver"
cp "$work/plugins/kpreload-init" "$hr/usr/lib/kpreload/kpreload-init"
echo "root=UUID=$uuid rw" >"$hr/etc/kpreload/cmdline"
for i in $(seq 1 "$runs"); do
  s=$(now)
  "$work/plugins/kpreload" kernel-hook postinst --root "$hr" "$kver" >"$work/logs/hook-$i.log" 2>&1 || fail "kernel hook failed" "$work/logs/hook-$i.log"
  printf '{"kind":"install","name":"kpreload kernel-hook postinst","seconds":%s}\n' "$(seconds "$s" "$(now)")" >>"$samples"
  s=$(now)
  TMPDIR="$work/tmp" in_debian_ns mkinitramfs -d "$work/debian/conf" -o "$work/tmp/mkinitramfs-$i.img" "$kver" >"$work/logs/mkinitramfs-$i.log" 2>&1 ||
    fail "mkinitramfs failed" "$work/logs/mkinitramfs-$i.log"
  printf '{"kind":"install","name":"Debian mkinitramfs (MODULES=most)","seconds":%s}\n' "$(seconds "$s" "$(now)")" >>"$samples"
  rm -f "$work/tmp/mkinitramfs-$i.img"
done
lsinitramfs "$work/debian.img" >"$work/logs/debian-contents.txt"
grep -q 'updates/dkms/kpreload_edu.ko$' "$work/logs/debian-contents.txt" || die "Debian's initrd lacks the test driver"

for i in $(seq 1 "$runs"); do
  for v in kpreload debian grub-bios grub-uefi grub-secure nocloud; do
    d="$work/boots/$v-$i"
    mkdir -p "$d"
    qemu-img create -q -f qcow2 -F qcow2 -b "$qcow2" "$d/disk.qcow2"
    log "boot $i/$runs $v"
    case $v in
      kpreload) "$bi" boot -name "kpreload (image as built, UEFI)" -disk "$d/disk.qcow2" -timeout "${timeout}s" -work "$d" >>"$samples" 2>"$d/stderr" ||
        fail "kpreload boot $i failed" "$d/stderr" ;;
      debian) "$bi" boot -name "Debian initramfs-tools (same disk)" -disk "$d/disk.qcow2" -kernel "$vmlinuz" -initrd "$work/debian.img" \
        -append "root=UUID=$uuid rw $extra" -timeout "${timeout}s" -work "$d" >>"$samples" 2>"$d/stderr" ||
        fail "Debian boot $i failed" "$d/stderr" ;;
      grub-bios|grub-uefi)
        rm -f "$d/disk.qcow2"
        qemu-img create -q -f qcow2 -F qcow2 -b "$grub_qcow2" "$d/disk.qcow2"
        "$bi" boot -name "kpreload, GRUB image (${v#grub-})" -firmware "${v#grub-}" -disk "$d/disk.qcow2" -timeout "${timeout}s" -work "$d" >>"$samples" 2>"$d/stderr" ||
        fail "GRUB ${v#grub-} boot $i failed" "$d/stderr" ;;
      grub-secure)
        rm -f "$d/disk.qcow2"
        qemu-img create -q -f qcow2 -F qcow2 -b "$sb_qcow2" "$d/disk.qcow2"
        "$bi" boot -name "kpreload, GRUB image, Secure Boot (uefi-secure)" -firmware uefi-secure -vars "$sb_vars" \
          -disk "$d/disk.qcow2" -timeout "${timeout}s" -work "$d" >>"$samples" 2>"$d/stderr" ||
          fail "GRUB Secure Boot boot $i failed" "$d/stderr" ;;
      nocloud)
        rm -f "$d/disk.qcow2"
        qemu-img create -q -f qcow2 -F qcow2 -b "$cloud_qcow2" "$d/disk.qcow2"
        seed "$d" "$i"
        "$bi" boot -name "kpreload, cloud-init image, NoCloud seed (UEFI)" -drive "$d/seed.img" -net -want-source seed \
          -disk "$d/disk.qcow2" -timeout "${timeout}s" -work "$d" >>"$samples" 2>"$d/stderr" ||
          fail "NoCloud boot $i failed" "$d/stderr" ;;
    esac
    rm -f "$d/disk.qcow2"
  done
done

log "against diskimage-builder: the same image by disk-image-create and kpreload image build"
versus "$work/dib"

echo "bench-image: kernel $kver (against diskimage-builder: $versus_kernel), $runs runs, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), QEMU $(qemu-system-x86_64 --version | sed -n '1s/^QEMU emulator version \([^ ]*\).*/\1/p') TCG, Packer $("$packer" version | head -n1)"
echo
"$bi" table "$samples"
ok=1
