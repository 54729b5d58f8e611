#!/usr/bin/env bash
# Runs every fuzz target of the parsers fed from outside for FUZZTIME each
# (go test -fuzz takes one target per run), one after another, and prints per
# target the executions and whether a crasher was found. Exits non-zero when
# any target fails. A crasher is written by go test to
# <package>/testdata/fuzz/<Target>/<hash>: it is then a seed `go test` runs.
#
#   FUZZTIME=30s       time per target (go test -fuzztime: 30s, or 10000x)
#   FUZZPARALLEL=1     fuzzing workers per target (-parallel)
#   FUZZMINIMIZE=100x  budget to minimize a new input (-fuzzminimizetime; a time
#                      budget lets minimizing slow targets eat the whole FUZZTIME)
#   FUZZ='Parse'       only targets whose "package Target" matches this regexp
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-30s}
FUZZPARALLEL=${FUZZPARALLEL:-1}
FUZZMINIMIZE=${FUZZMINIMIZE:-100x}
FUZZ=${FUZZ:-.}

targets=(
	"./gpu/instance FuzzParse"
	"./gpu/instance FuzzFromCmdline"
	"./gpu/instance FuzzFind"
	"./gpu/instance FuzzParseUserData"
	"./kmodcache/bootindex FuzzRead"
	"./gpu/devnodes FuzzPlan"
	"./gpu/supported FuzzParse"
	"./kmodcache/manifest FuzzUnmarshal"
	"./builder/recipe FuzzParse"
	"./initramfs/kcmdline FuzzParse"
	"./kmodcache/modinfo FuzzParse"
	"./kmodcache/modinfo FuzzDecompress"
	"./gpu/pci FuzzParseModalias"
	"./live/fwcfg FuzzLookup"
	"./kmodcache/remote FuzzParseRecord"
	"./kmodcache/remote FuzzPlanPull"
	"./kmodcache/modalias FuzzLoadTree"
	"./builder/dkms FuzzParseConf"
	"./kmodcache/modsig FuzzReadFile"
	"./kmodcache/modsig FuzzSignatureRoundTrip"
	"./initramfs/rootfs FuzzParseSpec"
	"./builder/archive FuzzParseMadison"
	"./gpu/k8sconfig FuzzFiles"
	"./gpu/xorg FuzzParseAddress"
	"./report FuzzDecodeRootInit"
	"./report FuzzScan"
	"./gpu/cdispec FuzzLdcache"
	"./gpu/cdispec FuzzReadGPUs"
	"./gpu/cdispec FuzzReadVersion"
	"./gpu/cdispec FuzzContainerRoot"
	"./gpu/activate FuzzReadReady"
	"./builder/install FuzzParseRemoteConfig"
	"./builder/install FuzzReadSettings"
	"./builder/install FuzzGrubEntries"
	"./builder/install FuzzCheckGrubConfig"
	"./kmodcache/cellsign FuzzLoadTrust"
	"./kmodcache/cellsign FuzzLoadSigner"
	"./initramfs/rootfs FuzzSuperblock"
	"./initramfs/rootfs FuzzFeatures"
	"./initramfs/seed FuzzFind"
	"./initramfs/seed FuzzRead"
	"./initramfs/modprobe FuzzParse"
	"./internal/termtext FuzzEscape"
)

logdir=$(mktemp -d /tmp/kpreload-fuzz.XXXXXX)
failed=0
rows=()
for t in "${targets[@]}"; do
	read -r pkg name <<<"$t"
	[[ "$pkg $name" =~ $FUZZ ]] || continue
	log="$logdir/$(basename "$pkg")-$name.log"
	echo "== $pkg $name ($FUZZTIME)"
	start=$SECONDS
	$GO test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" -fuzzminimizetime "$FUZZMINIMIZE" \
		-parallel "$FUZZPARALLEL" "$pkg" >"$log" 2>&1
	rc=$?
	secs=$((SECONDS - start))
	# The last progress line carries the total: "fuzz: elapsed: 30s, execs: 1234 (41/sec), new interesting: 3 (total: 20)".
	execs=$(grep -o 'execs: [0-9]*' "$log" | tail -1 | awk '{print $2}')
	interesting=$(grep -o 'new interesting: [0-9]*' "$log" | tail -1 | awk '{print $3}')
	crasher=$(grep -o 'Failing input written to testdata/fuzz/[^ ]*' "$log" | tail -1 | awk '{print $5}')
	if [[ $rc -eq 0 ]]; then
		result="ok"
	elif [[ -z $crasher ]] && grep -q '^    context deadline exceeded$' "$log" && ! grep -q -e '^panic: ' -e 'Failing input' "$log"; then
		# Go <= 1.26's coordinator can report its own -fuzztime deadline as
		# a failure (go.dev/issue/75804): no input failed, none was written.
		result="ok (fuzztime deadline race, go.dev/issue/75804; no crasher)"
	else
		failed=1
		result="FAIL${crasher:+ (crasher: ${pkg#./}/$crasher)}"
		tail -40 "$log"
	fi
	rows+=("$(printf '%-22s %-16s %10s %6s %5ss  %s' "${pkg#./}" "$name" "${execs:-0}" "${interesting:-0}" "$secs" "$result")")
done

echo
printf '%-22s %-16s %10s %6s %6s  %s\n' package target execs new wall result
for r in "${rows[@]}"; do echo "$r"; done
echo "logs: $logdir"
if [[ $failed -ne 0 ]]; then
	echo "fuzz: crashers or failures found (see above)" >&2
	exit 1
fi
