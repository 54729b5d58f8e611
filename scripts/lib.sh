# lib.sh: shared settings for kpreload's scripts. Source it; do not run it.
# shellcheck shell=bash

# Where downloaded kernels, headers and other reusable inputs live between runs.
: "${KPRELOAD_CACHE:=/var/cache/kpreload}"
export KPRELOAD_CACHE
# The default kernel matrix for tests and the demo: one 6.1 cloud kernel (plain .ko,
# virtio modular), one 6.12 bookworm-backports cloud kernel (.ko.xz) and trixie's 6.12
# cloud kernel (built for in a trixie build root: gcc-14).
if [ -z "${KPRELOAD_KERNELS+x}" ]; then
  KPRELOAD_KERNELS=(6.1.0-56-cloud-amd64 6.12.117+deb12-cloud-amd64 6.12.118+deb13-cloud-amd64)
else
  read -r -a KPRELOAD_KERNELS <<<"$KPRELOAD_KERNELS"
fi
# The other Debian flavours of those releases (bookworm's generic and rt, trixie's
# generic), which modules they carry as modules where the cloud kernels build them in
# (crc32c, ...). Only unpacked: the initramfs tests compare kpreload's module
# resolution with modprobe's on them, and initramfs/e2e TestGenericKernelRoots builds
# the test driver for the generic ones itself and boots them; no default matrix has them.
if [ -z "${KPRELOAD_FLAVOUR_KERNELS+x}" ]; then
  KPRELOAD_FLAVOUR_KERNELS=(6.1.0-56-amd64 6.1.0-56-rt-amd64 6.12.118+deb13-amd64)
else
  read -r -a KPRELOAD_FLAVOUR_KERNELS <<<"$KPRELOAD_FLAVOUR_KERNELS"
fi

log()  { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die()  { printf 'error: %s\n' "$*" >&2; exit 1; }

# ensure_packages PKG...: apt-get install the packages that are not installed yet
# (running apt-get update once if the first attempt fails). Needs root.
ensure_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 || {
    apt-get update -qq >&2 || warn "apt-get update reported errors"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  }
}

# What Debian's mkinitramfs needs (its own dependencies, and busybox, which apt installs
# with it as a Recommends and which Debian's initramfs then uses as its shell).
MKINITRAMFS_PACKAGES=(initramfs-tools-core udev klibc-utils busybox kmod cpio zstd)

# in_debian_ns CMD...: run CMD in a private mount namespace where /lib/modules holds the
# unpacked kernel's modules ($BENCH_KTREE/lib) with the changes in $BENCH_UPPER on top
# (overlay, work dir $BENCH_OVL, over $BENCH_LIBDIR: /usr/lib on merged /usr) and /boot
# is the unpacked kernel's, so mkinitramfs sees that kernel while the host stays as it
# is. When $BENCH_ELAPSED is set, CMD's wall time in ms is written there.
in_debian_ns() {
  unshare --mount --propagation private bash -c '
    set -euo pipefail
    mount -t overlay kpreload-bench \
      -o "lowerdir=$BENCH_KTREE/lib:$BENCH_LIBDIR,upperdir=$BENCH_UPPER,workdir=$BENCH_OVL" "$BENCH_LIBDIR"
    mount --bind "$BENCH_KTREE/boot" /boot
    start=$(date +%s%N)
    "$@"
    end=$(date +%s%N)
    if [ -n "${BENCH_ELAPSED:-}" ]; then echo $(( (end - start) / 1000000 )) >"$BENCH_ELAPSED"; fi' bench-ns "$@"
}

# apt_suite_opts SUITE: print (one per line) the apt-get/apt-cache -o options that read
# Debian suite SUITE through kpreload's private apt configuration under
# $KPRELOAD_CACHE/apt/SUITE (own sources list, lists, archive cache, empty dpkg status),
# running apt-get update for it when its lists are missing or a day old. Every suite,
# bookworm (the default, for an empty SUITE) included, has one. The layout and sources
# are builder/archive's (TestScriptMatchesArchive checks they agree); the host's apt
# state is never touched.
apt_suite_opts() {
  local suite=${1:-bookworm} dir comps="main contrib non-free non-free-firmware" m keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  case "$suite" in bookworm|trixie|forky|sid|unstable|experimental) ;; *) die "unknown Debian suite $suite: kpreload reads bookworm, trixie, forky, sid, unstable, experimental" ;; esac
  [ -f "$keyring" ] || die "Debian's archive keyring $keyring, which kpreload's $suite configuration trusts alone, is missing (install debian-archive-keyring)"
  m="[signed-by=$keyring] http://deb.debian.org/debian"
  dir="$KPRELOAD_CACHE/apt/$suite"
  mkdir -p "$dir/sources.list.d" "$dir/preferences.d" "$dir/lists/partial" "$dir/cache/archives/partial"
  local want
  want="# kpreload's private apt configuration for $suite (never used to install)"$'\n'
  case "$suite" in
    sid|unstable) want+="deb $m sid $comps"$'\n' ;;
    experimental) want+="deb $m sid $comps"$'\n'"deb $m experimental $comps"$'\n' ;;
    *) want+="deb $m $suite $comps"$'\n'"deb $m $suite-updates $comps"$'\n'"deb [signed-by=$keyring] http://deb.debian.org/debian-security $suite-security $comps"$'\n'"deb $m $suite-backports $comps"$'\n' ;;
  esac
  local changed=0
  if [ "$(cat "$dir/sources.list" 2>/dev/null)"$'\n' != "$want" ]; then
    printf '%s' "$want" >"$dir/sources.list.tmp" && mv "$dir/sources.list.tmp" "$dir/sources.list"
    changed=1
  fi
  [ -f "$dir/status" ] || : >"$dir/status"
  local opts=(-o "Dir::Etc::SourceList=$dir/sources.list" -o "Dir::Etc::SourceParts=$dir/sources.list.d"
    -o "Dir::Etc::Preferences=$dir/preferences" -o "Dir::Etc::PreferencesParts=$dir/preferences.d"
    -o "Dir::State::Lists=$dir/lists" -o "Dir::State::status=$dir/status" -o "Dir::Cache=$dir/cache"
    -o "Dir::Cache::pkgcache=pkgcache.bin" -o "APT::Get::List-Cleanup=0" -o "Debug::NoLocking=1")
  # The update lock (builder/archive's too) keeps two fetches out of one lists directory;
  # a failed update must not leave the last good stamp behind.
  local lockfd
  exec {lockfd}>"$dir/update.lock" && flock "$lockfd" || die "cannot lock $dir/update.lock"
  if [ "$changed" = 1 ] || [ -z "$(find "$dir/updated" -mmin -1440 2>/dev/null)" ]; then
    local log="$KPRELOAD_CACHE/logs/apt-$suite.log"
    mkdir -p "$KPRELOAD_CACHE/logs"
    rm -f "$dir/updated"
    apt-get "${opts[@]}" update -q >"$log" 2>&1 || die "apt-get update of kpreload's $suite configuration failed (log: $log)"
    ! grep -q '^Err:' "$log" || die "apt-get update of kpreload's $suite configuration could not read every source (log: $log)"
    date -u +%FT%TZ >"$dir/updated"
  fi
  exec {lockfd}>&-
  printf '%s\n' "${opts[@]}"
}

# The registry benchmarks' (bench-dist.sh, bench-follow.sh) common parts.
# bench_start WORKNAME TOOL...: die unless Debian's docker-registry and the TOOLs are
# installed, make the work directory $work (/tmp/kpreload-WORKNAME.XXXXXX) and set the
# EXIT trap that stops the registry and removes $work once the script set ok=1 (and
# keep=0), else says where it is.
REGISTRY=/usr/bin/docker-registry
bench_start() {
  local name=$1 tool; shift
  [ -x "$REGISTRY" ] || die "$REGISTRY is missing: run scripts/deps.sh"
  for tool in "$@"; do
    command -v "$tool" >/dev/null || die "$tool is missing: run scripts/deps.sh"
  done
  work=$(mktemp -d "/tmp/kpreload-$name.XXXXXX")
  ok=0
  REGISTRY_PID=
  trap bench_cleanup EXIT
}
bench_cleanup() {
  [ -n "$REGISTRY_PID" ] && kill "$REGISTRY_PID" 2>/dev/null || true
  if [ "$ok" = 1 ] && [ "$keep" = 0 ]; then rm -rf "$work"; else echo "work directory kept: $work" >&2; fi
}

# start_registry: run the registry on a free loopback port ($port), storing under
# $work/registry, and wait until it answers.
start_registry() {
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  cat >"$work/registry.yml" <<CFG
version: 0.1
log: {level: warn, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: $work/registry}}
http: {addr: 127.0.0.1:$port}
CFG
  "$REGISTRY" serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
  REGISTRY_PID=$!
  for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/v2/" >/dev/null && break; sleep 0.1; done
  curl -fs "http://127.0.0.1:$port/v2/" >/dev/null || die "the registry did not start: $(tail -5 "$work/registry.log")"
}

# now: the time in seconds; since T: the seconds since T (two decimals).
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f\n", b - a }'; }

# The NVIDIA benchmarks' (bench-nvidia.sh, nvidia-breakdown.sh) common parts.
# nvidia_cell KPRELOAD RECIPE KVER WORK: the recipe's cell for KVER in
# $KPRELOAD_CACHE/store (built with the real dkms unless it is there: minutes); sets
# NVIDIA_KVER, NVIDIA_SET, NVIDIA_MANIFEST, NVIDIA_DRIVER, NVIDIA_VERSION and NVIDIA_FLAVOR.
nvidia_cell() {
  local kp=$1 recipe=$2 kver=$3 work=$4 store="$KPRELOAD_CACHE/store"
  log "the $recipe cell for $kver (built with dkms unless $store holds it)"
  "$kp" build --recipes "$top/recipes" --cache "$store" --json "$recipe:$kver" >"$work/build.json" 2>"$work/logs/build.log" ||
    { tail -n 25 "$work/logs/build.log" >&2; die "kpreload build $recipe:$kver failed (log: $work/logs/build.log)"; }
  NVIDIA_KVER=$kver
  NVIDIA_SET=$(jq -r '.[0].set_id' "$work/build.json")
  NVIDIA_MANIFEST="$store/sets/$NVIDIA_SET.json"
  [ -f "$NVIDIA_MANIFEST" ] || die "no manifest $NVIDIA_MANIFEST"
  NVIDIA_DRIVER=$(jq -r .driver "$NVIDIA_MANIFEST")
  NVIDIA_VERSION=$(jq -r .version "$NVIDIA_MANIFEST")
  NVIDIA_FLAVOR=$(jq -r .flavor "$NVIDIA_MANIFEST")
  log "set ${NVIDIA_SET:0:12}: $NVIDIA_DRIVER $NVIDIA_VERSION $NVIDIA_FLAVOR, $(jq -r '[.modules[].file] | join(" ")' "$NVIDIA_MANIFEST")"
}

# nvidia_forms KPRELOAD WORK FORM...: the cell's module files in each FORM under WORK/mods/FORM
# and a module cache of them, WORK/cache-FORM: plain (.ko), xz (compressed as the
# kernel's own modules are: crc32, 1 MiB dictionary), zstd (-19), signed (plain, signed
# with a throwaway key by the kernel's sign-file; $NVIDIA_KVER names the kernel).
nvidia_forms() {
  local kp=$1 work=$2 file sha obj base form sig
  shift 2
  mkdir -p "$work/mods/plain"
  while read -r file sha; do
    obj="$KPRELOAD_CACHE/store/objects/sha256/${sha:0:2}/$sha"
    base=${file%.xz}; base=${base%.zst}
    case $file in
      *.xz) xz -dc "$obj" >"$work/mods/plain/$base" ;;
      *.zst) zstd -qdc "$obj" >"$work/mods/plain/$base" ;;
      *) cp "$obj" "$work/mods/plain/$base" ;;
    esac
  done < <(jq -r '.modules[] | "\(.file) \(.sha256)"' "$NVIDIA_MANIFEST")
  for form in "$@"; do
    mkdir -p "$work/mods/$form"
    for file in "$work/mods/plain"/*; do
      base=$(basename "$file")
      case $form in
        plain) ;;
        xz) xz --check=crc32 --lzma2=dict=1MiB -c "$file" >"$work/mods/xz/$base.xz" ;;
        zstd) zstd -q -19 "$file" -o "$work/mods/zstd/$base.zst" ;;
        signed)
          # Signed with a throwaway key by the kernel's own sign-file: no kernel
          # trusts it, so a kernel that does not enforce signatures checks the
          # signature (hashing the whole module) and loads it, tainted.
          if [ ! -f "$work/sign.pem" ]; then
            openssl req -new -x509 -nodes -newkey rsa:2048 -sha256 -days 1 -subj "/CN=kpreload benchmark" \
              -keyout "$work/sign.pem" -out "$work/sign.crt" -outform DER >"$work/logs/sign-key.log" 2>&1 ||
              die "openssl req failed (log: $work/logs/sign-key.log)"
          fi
          cp "$file" "$work/mods/signed/$base"
          "$(nvidia_sign_file)" sha256 "$work/sign.pem" "$work/sign.crt" "$work/mods/signed/$base" || die "sign-file $base failed" ;;
        *) die "unknown module form $form" ;;
      esac
    done
    "$kp" cache add --cache "$work/cache-$form" --driver "$NVIDIA_DRIVER" --version "$NVIDIA_VERSION" --flavor "$NVIDIA_FLAVOR" \
      "$work/mods/$form"/* >"$work/logs/cache-$form.log" 2>&1 ||
      { tail -n 25 "$work/logs/cache-$form.log" >&2; die "cache add ($form) failed (log: $work/logs/cache-$form.log)"; }
  done
}

# nvidia_sign_file: the kernel $NVIDIA_KVER's own sign-file (from its linux-kbuild).
nvidia_sign_file() {
  local f
  f=$(ls "$KPRELOAD_CACHE/kernels/$NVIDIA_KVER"/usr/lib/linux-kbuild-*/scripts/sign-file 2>/dev/null | head -n1)
  [ -x "$f" ] || die "no sign-file under $KPRELOAD_CACHE/kernels/$NVIDIA_KVER (its linux-kbuild is unpacked with the kernel)"
  echo "$f"
}

# nvidia_sizes WORK FORM...: the driver's main module's size in each form, for a note.
nvidia_sizes() {
  local work=$1 form f out=()
  shift
  for form in "$@"; do
    f=$(ls "$work/mods/$form/$NVIDIA_DRIVER".ko* | head -n1)
    out+=("$form $(stat -c %s "$f") B")
  done
  local IFS=,
  echo "${out[*]}" | sed 's/,/, /g'
}
