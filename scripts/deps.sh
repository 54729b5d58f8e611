#!/usr/bin/env bash
# deps.sh: install everything kpreload's build, tests and demo need, idempotently.
#
#   scripts/deps.sh            apt sources + packages + Go modules + Packer (1.15.0 and 1.9.4)
#                              + the default kernels
#                              (KPRELOAD_KERNELS, and KPRELOAD_FLAVOUR_KERNELS unpacked for the tests)
#   scripts/deps.sh --no-kernels
#
# Apt: adds contrib/non-free/non-free-firmware and bookworm-backports in a sources
# file of the project's own (/etc/apt/sources.list.d/kpreload.sources), then installs
# the packages below. Kernels are fetched with scripts/kernels.sh (unpacked per kernel
# under $KPRELOAD_CACHE, never installed system-wide).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

want_kernels=1
[ "${1:-}" = "--no-kernels" ] && want_kernels=0

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

sources=/etc/apt/sources.list.d/kpreload.sources
read -r -d '' want_sources <<'SRC' || true
# Written by kpreload scripts/deps.sh: the components and suites kpreload needs beyond
# Debian's default "main" (NVIDIA driver sources, GSP firmware, 6.12 cloud kernels).
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: contrib non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: contrib non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main contrib non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC

packages=(
  qemu-system-x86 qemu-utils ovmf   # boots
  dkms kmod make gcc libc6-dev bc    # module builds and the modprobe/depmod oracle
  patch                              # recipes' patches (applied to a copy of the DKMS source)
  dwarves                            # pahole: 6.12 headers build BTF for modules
  cpio zstd lz4 xz-utils gzip tar e2fsprogs  # archives and root disks; GCE image tarballs (GNU tar -S, gzip)
  fsverity                           # fsverity digest: the oracle of the fs-verity digests cells record
  xfsprogs btrfs-progs               # xfs and btrfs roots: their superblocks, install's root check
  initramfs-tools-core busybox       # the baseline benchmarks compare against
  dpkg-dev                           # dpkg -x / apt-get download helpers
  bubblewrap                         # bwrap: a root's own programs (update-grub, ldconfig, grub-mkimage) in a sandbox
  mmdebstrap                         # image rootfs, without a VM or loop mounts; make deb's install test roots (bookworm, trixie)
  lintian                            # make deb's package checked as Debian checks packages
  systemd-boot-efi dosfstools mtools fdisk  # UEFI ESP: systemd-boot, mkfs.vfat, mcopy, sfdisk
  openssl                            # module signing keys
  sbsigntool python3-virt-firmware   # Secure Boot: sbverify of boot binaries, OVMF variable stores with a MOK (virt-fw-vars, bookworm-backports)
  openssh-server jq                  # the Packer provisioner's SSH test; benchmark scripts
  chromium                           # the boot timeline pictures checked in a real browser (headless)
  docker-registry                    # a real OCI registry (distribution 2.8) for the remote cache tests
  reprepro gnupg                     # a local signed apt archive for the extra-archive tests
  podman crun                        # CDI: kpreload's spec beside NVIDIA's toolkit spec in a real runtime (TestCDIPodmanBesideToolkit)
  python3-diskimage-builder debootstrap sudo  # an image another tool made (diskimage-builder, which runs sudo) for the install --stage test
  vmdb2 zerofree                     # another image builder's image (vmdb2, whose mount step runs zerofree) for the install --stage test
)

stamp="$KPRELOAD_CACHE/.deps-apt"
if ! cmp -s <(printf '%s\n' "$want_sources") "$sources" 2>/dev/null; then
  log "writing $sources"
  printf '%s\n' "$want_sources" | as_root tee "$sources" >/dev/null
  rm -f "$stamp"
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done
# apt's and dpkg's own output goes to a log; its path is printed on failure.
mkdir -p "$KPRELOAD_CACHE/logs"
aptlog="$KPRELOAD_CACHE/logs/deps-apt.log"
if [ ! -f "$stamp" ] || [ ${#missing[@]} -gt 0 ]; then
  log "apt-get update (log: $aptlog)"
  # Other sources on the machine may be unreachable; ours must work, checked below.
  as_root apt-get update -qq >>"$aptlog" 2>&1 || warn "apt-get update reported errors (continuing; packages are checked next; see $aptlog)"
  touch "$stamp"
fi
if [ ${#missing[@]} -gt 0 ]; then
  log "installing: ${missing[*]} (log: $aptlog)"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$aptlog" 2>&1 ||
    die "apt-get install failed; the last lines of $aptlog:
$(tail -n 15 "$aptlog")"
fi

if command -v go >/dev/null; then
  log "go mod download"
  (cd "$here/.." && go mod download)
else
  die "go not found on PATH (need Go >= 1.24)"
fi

# Packer 1.15.0 (what users download today) and 1.9.4 (the last MPL release), each built
# once from a scratch module (several minutes on 2 cores), side by side under
# $KPRELOAD_CACHE/packer/<version>/packer; and Packer's QEMU plugin, which Packer no longer
# bundles, for the tests' QEMU builder (built only: tests install it where they need it).
log "packer: $("$here/packer.sh" --qemu | tr '\n' ' ')"
log "packer (MPL): $(PACKER_VERSION=1.9.4 "$here/packer.sh" | tail -n1)"

if [ "$want_kernels" = 1 ]; then
  "$here/kernels.sh" "${KPRELOAD_KERNELS[@]}" "${KPRELOAD_FLAVOUR_KERNELS[@]}"
fi
log "dependencies ready"
