package cdicmd

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"
	"github.com/kpreload/kpreload/gpu/activate"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

const (
	// podmanVersion is the driver version of both specs (the toolkit's capture
	// and the H200 tree kpreload describes).
	podmanVersion = "580.159.04"
	// ctkUUID is the GPU in the toolkit's spec, kpUUID the one in kpreload's.
	ctkUUID = "GPU-ee139b59-42bc-3933-d0c7-f93c69915858"
	kpUUID  = "GPU-7843b487-7c5d-bf32-e87d-73ef066a19c5"
)

// podmanProbe runs in every container: it says whose libcuda it got
// (kpreload mounts it at /usr/lib/x86_64-linux-gnu, the toolkit at
// /usr/local/nvidia/lib64; each host file says which spec's it is), the
// toolkit's own variable, and the device nodes.
const podmanProbe = `#!/bin/sh
for f in /usr/lib/x86_64-linux-gnu/libcuda.so.` + podmanVersion + ` /usr/local/nvidia/lib64/libcuda.so.` + podmanVersion + `; do
	[ -e "$f" ] && echo "libcuda $f: $(cat "$f")"
done
echo "NVIDIA_CTK_LIBCUDA_DIR=${NVIDIA_CTK_LIBCUDA_DIR:-unset}"
for n in /dev/nvidia*; do [ -e "$n" ] && echo "node $(ls -l "$n" | awk '{print $5 $6, $NF}')"; done
exit 0
`

// podmanScript runs as root in a mount namespace of its own (unshare -m):
// /etc, /run, /var, /usr, /opt and /dev are overlays whose changes go to
// the test's directory, so the host is never changed. /usr gains the files
// the toolkit's spec mounts (and a stand-in nvidia-cdi-hook), /opt the
// kpreload image's driver tree, /dev the toolkit spec's device nodes (its
// nodes carry no type, so the CDI library reads them from the host); the
// image's CDI directories are bound over /etc/cdi and /var/run/cdi, so
// podman reads exactly what kpreload cdi refresh --root TREE left there.
// On a hybrid cgroup host crun refuses to run, so the cgroup2 mount is
// dropped in the namespace.
const podmanScript = `set -eu
W=$1 BIN=$2 TREE=$3 NODES=$4 S=$5
mount --make-rprivate /
ov() { mkdir -p "$W/ov/$1.u" "$W/ov/$1.w"; mount -t overlay overlay -o "lowerdir=$2,upperdir=$W/ov/$1.u,workdir=$W/ov/$1.w" "/$1"; }
ov etc /etc; ov run /run; ov var /var; ov usr "$W/ctk/usr:/usr"; ov opt "$TREE/opt:/opt"; ov dev /dev
mount -t tmpfs tmpfs /dev/shm
if [ "$(stat -f -c %T /sys/fs/cgroup)" = tmpfs ] && mountpoint -q /sys/fs/cgroup/unified; then umount /sys/fs/cgroup/unified; fi
while read -r p t ma mi; do mkdir -p "$(dirname "$p")"; mknod "$p" "$t" "$ma" "$mi"; done <"$NODES"
mkdir -p /etc/cdi /var/run/cdi "$TREE/etc/cdi" "$TREE/var/run/cdi" "$TREE/etc/kpreload"
mount --bind "$TREE/etc/cdi" /etc/cdi
mount --bind "$TREE/var/run/cdi" /var/run/cdi
P="podman --root $S/storage --runroot $S/runroot --tmpdir $S/tmp --storage-driver vfs --cgroup-manager cgroupfs --events-backend file"
echo "podman: $(podman --version), $(crun --version | head -1)"
$P import -q "$W/rootfs.tar" localhost/kpreload-cdi-probe >/dev/null
refresh() { echo "== $1"; echo "\$ kpreload cdi refresh"; "$BIN" cdi refresh --root "$TREE" --hook-path "$BIN" 2>&1 || echo "exit $?"; echo "/etc/cdi: $(ls /etc/cdi | tr '\n' ' ')"; echo "/var/run/cdi: $(ls /var/run/cdi | tr '\n' ' ')"; }
probe() {
	echo "\$ podman run --device $1"
	rc=0
	$P run --rm --network none --cgroups disabled --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 --device "$1" localhost/kpreload-cdi-probe /bin/probe >"$W/out" 2>&1 || rc=$?
	sed 's/^/  /' "$W/out"; echo "  rc=$rc"
}

cp "$W/ctk.yaml" "$TREE/etc/cdi/nvidia.yaml"
refresh "A: toolkit's static spec (nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml) and kpreload's"
probe nvidia.com/gpu=all; probe nvidia.com/gpu=0; probe nvidia.com/gpu=` + ctkUUID + `

cp "$W/ctk.yaml" "$TREE/var/run/cdi/nvidia.yaml"
refresh "B: toolkit's runtime spec (nvidia-cdi-refresh) beside kpreload's in /var/run/cdi"
probe nvidia.com/gpu=all; probe nvidia.com/gpu=` + ctkUUID + `; probe nvidia.com/gpu=` + kpUUID + `

echo "nvidia: false" >"$TREE/etc/kpreload/cdi.yaml"
refresh "C: kpreload's side off (nvidia: false in /etc/kpreload/cdi.yaml)"
probe nvidia.com/gpu=all

rm "$TREE/etc/kpreload/cdi.yaml" "$TREE/etc/cdi/nvidia.yaml" "$TREE/var/run/cdi/nvidia.yaml"
refresh "D: the toolkit's side off (nvidia-cdi-refresh disabled, its specs removed)"
probe nvidia.com/gpu=all

cp "$W/ctk.yaml" "$TREE/var/run/cdi/nvidia.yaml"
rm "$TREE/run/kpreload/ready"
refresh "E: kpreload drives no driver, the toolkit's runtime spec is there"
probe nvidia.com/gpu=all
`

// TestCDIPodmanBesideToolkit runs the real podman (Debian 12's 4.3.1 with
// crun) with NVIDIA Container Toolkit's spec (a real nvidia-ctk 1.20.1
// output, unchanged) and kpreload's (written by kpreload cdi refresh on a
// kpreload image tree with NVIDIA's driver active) in each arrangement
// docs/containers.md describes, and checks which spec each request
// resolves to: a later CDI directory wins (/var/run/cdi over /etc/cdi), the
// same name in two specs of one directory resolves to neither, and turning
// either side off leaves the other's. No GPU is needed: the spec's host
// files are test files saying whose they are, its nodes test-made.
func TestCDIPodmanBesideToolkit(t *testing.T) {
	for _, tool := range []string{"podman", "crun", "unshare", "mknod", "mountpoint"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing: install the test dependencies with scripts/deps.sh (%v)", tool, err)
		}
	}
	if os.Geteuid() != 0 {
		t.Fatal("podman's CDI test runs podman as root in a mount namespace of its own: run the tests as root")
	}
	w := t.TempDir()
	bin := testenv.GoBuildStatic(t, w, "kpreload", "./cmd/kpreload")

	// The kpreload image: the H200 tree with NVIDIA's driver active.
	tree := cdiTree(t)
	drv := filepath.Join(tree, "opt/kpreload/drivers", podmanVersion, "usr/lib/x86_64-linux-gnu")
	clitest.MustWrite(t, filepath.Join(drv, "libcuda.so."+podmanVersion), "kpreload's spec\n")
	run := filepath.Join(tree, activate.RunDir)
	if err := activate.Point(run, tree, activate.DriversDir, podmanVersion); err != nil {
		t.Fatal(err)
	}
	if err := activate.MarkReady(run, activate.Ready{Driver: "nvidia", Version: podmanVersion, By: "init"}); err != nil {
		t.Fatal(err)
	}

	// The toolkit's spec, as nvidia-ctk wrote it; every host file it mounts,
	// its hook program, and its device nodes.
	ctk := toolkitSpec(t)
	clitest.MustWrite(t, filepath.Join(w, "ctk.yaml"), ctk)
	spec, err := cdi.ParseSpec([]byte(ctk))
	if err != nil {
		t.Fatal(err)
	}
	var nodes strings.Builder
	all := []specs.ContainerEdits{spec.ContainerEdits}
	for _, d := range spec.Devices {
		all = append(all, d.ContainerEdits)
	}
	seenNode := map[string]bool{}
	for _, ce := range all {
		for _, m := range ce.Mounts {
			clitest.MustWrite(t, filepath.Join(w, "ctk", m.HostPath), "the toolkit's spec\n")
		}
		for _, h := range ce.Hooks {
			clitest.MustWrite(t, filepath.Join(w, "ctk", h.Path), "#!/bin/sh\n# a stand-in for nvidia-cdi-hook: reads the OCI state runtimes pass on stdin\ncat >/dev/null\n")
		}
		for _, n := range ce.DeviceNodes {
			if !seenNode[n.Path] {
				seenNode[n.Path] = true
				fmt.Fprintf(&nodes, "%s c %d %d\n", n.Path, n.Major, n.Minor)
			}
		}
	}
	clitest.MustWrite(t, filepath.Join(w, "nodes"), nodes.String())
	if err := os.Chmod(filepath.Join(w, "ctk/usr/bin/nvidia-cdi-hook"), 0o755); err != nil {
		t.Fatal(err)
	}

	// The container image: busybox and its libraries, and the probe.
	rootfs := filepath.Join(w, "rootfs")
	for _, f := range []string{"/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libresolv.so.2", "/bin/busybox"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("the probe image needs %s (busybox, from scripts/deps.sh): %v", f, err)
		}
		to := filepath.Join(rootfs, strings.Replace(f, "/lib/", "/usr/lib/", 1))
		clitest.MustWrite(t, to, string(b))
		if err := os.Chmod(to, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range []string{"sh", "cat", "ls", "awk", "echo"} {
		if err := os.Symlink("busybox", filepath.Join(rootfs, "bin", a)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("usr/lib", filepath.Join(rootfs, "lib")); err != nil {
		t.Fatal(err)
	}
	clitest.MustWrite(t, filepath.Join(rootfs, "bin/probe"), podmanProbe)
	if err := os.Chmod(filepath.Join(rootfs, "bin/probe"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"etc", "dev", "proc", "sys", "tmp"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := exec.Command("tar", "-C", rootfs, "-cf", filepath.Join(w, "rootfs.tar"), ".").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v: %s", err, b)
	}
	// podman's run root must have a short path (at most 50 characters).
	short, err := os.MkdirTemp("/tmp", "kpcdi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(short) })
	for _, d := range []string{"tmp", "storage", "runroot"} {
		if err := os.MkdirAll(filepath.Join(short, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	clitest.MustWrite(t, filepath.Join(w, "script.sh"), podmanScript)

	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 3*time.Minute))
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "-m", "sh", filepath.Join(w, "script.sh"), w, bin, tree, filepath.Join(w, "nodes"), short)
	b, err := cmd.CombinedOutput()
	out := string(b)
	t.Logf("podman beside the toolkit:\n%s", out)
	if err != nil {
		t.Fatalf("the podman script: %v", err)
	}
	kp := "libcuda /usr/lib/x86_64-linux-gnu/libcuda.so." + podmanVersion + ": kpreload's spec"
	tk := "libcuda /usr/local/nvidia/lib64/libcuda.so." + podmanVersion + ": the toolkit's spec"
	unresolvable := "unresolvable CDI devices nvidia.com/gpu=all"
	sections := strings.Split(out, "== ")
	if len(sections) != 6 {
		t.Fatalf("want 5 arrangements in the output, got %d", len(sections)-1)
	}
	tests := []struct {
		section int
		request string
		want    string // in the container's output; "" with rc=0: none of both
		rc0     bool
	}{
		{1, "nvidia.com/gpu=all", kp, true},
		{1, "nvidia.com/gpu=0", kp, true},
		{1, "nvidia.com/gpu=" + ctkUUID, tk, true},
		{2, "nvidia.com/gpu=all", unresolvable, false},
		{2, "nvidia.com/gpu=" + ctkUUID, tk, true},
		{2, "nvidia.com/gpu=" + kpUUID, kp, true},
		{3, "nvidia.com/gpu=all", tk, true},
		{4, "nvidia.com/gpu=all", kp, true},
		{5, "nvidia.com/gpu=all", tk, true},
	}
	for _, tt := range tests {
		sec := sections[tt.section]
		_, after, ok := strings.Cut(sec, "$ podman run --device "+tt.request+"\n")
		if !ok {
			t.Errorf("arrangement %c: no run with %s", 'A'+tt.section-1, tt.request)
			continue
		}
		got, _, _ := strings.Cut(after, "\n$ ")
		if !strings.Contains(got, tt.want) || strings.Contains(got+"\n", "  rc=0\n") != tt.rc0 {
			t.Errorf("arrangement %c, --device %s:\n%s\nwant %q and rc=0 %v", 'A'+tt.section-1, tt.request, got, tt.want, tt.rc0)
		}
		if tt.want == kp && strings.Contains(got, tk) || tt.want == tk && strings.Contains(got, kp) {
			t.Errorf("arrangement %c, --device %s: both specs' files:\n%s", 'A'+tt.section-1, tt.request, got)
		}
	}
	for _, want := range []struct {
		section int
		line    string
	}{
		{2, "cdi: warning: /var/run/cdi/nvidia.yaml (not written by kpreload) also defines nvidia.com/gpu=0, nvidia.com/gpu=all in /var/run/cdi"},
		{3, "cdi: kpreload's nvidia.com/gpu spec is off (nvidia: false in /etc/kpreload/cdi.yaml); removed /var/run/cdi/kpreload-nvidia.yaml (written by kpreload)"},
		{5, "cdi: no active driver kpreload describes; removed /var/run/cdi/kpreload-nvidia.yaml (written by kpreload); left /var/run/cdi/nvidia.yaml (not written by kpreload)"},
	} {
		if !strings.Contains(sections[want.section], want.line) {
			t.Errorf("arrangement %c does not say %q", 'A'+want.section-1, want.line)
		}
	}
}

// refreshExamplesScript runs the help's examples of cdi refresh, exactly as
// written, in a mount namespace of its own: /etc, /run and /var are overlays
// (NVIDIA's toolkit spec at /var/run/cdi/nvidia.yaml, no kpreload driver:
// the host as the toolkit leaves it), /mnt a tmpfs holding a kpreload image
// with NVIDIA's driver active.
const refreshExamplesScript = `set -eu
W=$1 TREE=$2 EXAMPLES=$3
mount --make-rprivate /
ov() { mkdir -p "$W/ov/$1.u" "$W/ov/$1.w"; mount -t overlay overlay -o "lowerdir=/$1,upperdir=$W/ov/$1.u,workdir=$W/ov/$1.w" "/$1"; }
ov etc; ov run; ov var
mkdir -p /var/run/cdi
cp "$W/ctk.yaml" /var/run/cdi/nvidia.yaml
mount -t tmpfs tmpfs /mnt
cp -a "$TREE/." /mnt/
while IFS= read -r line; do
	echo "\$ $line"
	sh -c "$line" 2>&1 || echo "exit $?"
done <"$EXAMPLES"
echo "/var/run/cdi: $(ls /var/run/cdi | tr '\n' ' ')"
echo "/mnt/run/cdi: $(ls /mnt/run/cdi | tr '\n' ' ')"
cmp -s "$W/ctk.yaml" /var/run/cdi/nvidia.yaml && echo "toolkit's spec unchanged"
`

// TestCDIRefreshHelpExamples runs every example of cdi refresh --help
// exactly as written (a kpreload on PATH), on a host where kpreload drives
// no driver beside NVIDIA's toolkit spec, and on a kpreload image at /mnt.
func TestCDIRefreshHelpExamples(t *testing.T) {
	for _, tool := range []string{"unshare", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing: %v", tool, err)
		}
	}
	if os.Geteuid() != 0 {
		t.Fatal("the examples run as root in a mount namespace of their own: run the tests as root")
	}
	if st, err := os.Stat("/mnt"); err != nil || !st.IsDir() {
		t.Fatalf("the example's /mnt: %v", err)
	}
	w := t.TempDir()
	binDir := filepath.Join(w, "bin")
	testenv.GoBuildStatic(t, binDir, "kpreload", "./cmd/kpreload")
	tree := cdiTree(t)
	drv := filepath.Join(tree, "opt/kpreload/drivers", podmanVersion, "usr/lib/x86_64-linux-gnu")
	clitest.MustWrite(t, filepath.Join(drv, "libcuda.so."+podmanVersion), "elf")
	run := filepath.Join(tree, activate.RunDir)
	if err := activate.Point(run, tree, activate.DriversDir, podmanVersion); err != nil {
		t.Fatal(err)
	}
	if err := activate.MarkReady(run, activate.Ready{Driver: "nvidia", Version: podmanVersion, By: "init"}); err != nil {
		t.Fatal(err)
	}
	clitest.MustWrite(t, filepath.Join(w, "ctk.yaml"), toolkitSpec(t))
	var lines []string
	for _, args := range cli.HelpExamples(t, "cdi", "refresh") {
		lines = append(lines, "kpreload "+strings.Join(args, " "))
	}
	if len(lines) != 3 {
		t.Fatalf("examples %q; the test knows 3", lines)
	}
	clitest.MustWrite(t, filepath.Join(w, "examples"), strings.Join(lines, "\n")+"\n")
	clitest.MustWrite(t, filepath.Join(w, "script.sh"), refreshExamplesScript)
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, time.Minute))
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "-m", "sh", filepath.Join(w, "script.sh"), w, tree, filepath.Join(w, "examples"))
	cmd.Env = append(os.Environ(), "PATH="+binDir+":"+os.Getenv("PATH"))
	b, err := cmd.CombinedOutput()
	out := string(b)
	t.Logf("cdi refresh examples:\n%s", out)
	if err != nil {
		t.Fatalf("the examples' script: %v", err)
	}
	left := "no active driver kpreload describes; no kpreload spec to remove; left /var/run/cdi/nvidia.yaml (not written by kpreload)"
	for _, want := range []string{
		"$ kpreload cdi refresh\ncdi: " + left + "\n",
		"$ kpreload cdi refresh --json\n{",
		`"summary": "` + left + `"`,
		"$ kpreload cdi refresh --root /mnt -o /run/cdi/kpreload-nvidia.yaml\ncdi: wrote /run/cdi/kpreload-nvidia.yaml (nvidia.com/gpu, the active nvidia driver)",
		"/var/run/cdi: nvidia.yaml \n",
		"/mnt/run/cdi: kpreload-nvidia.yaml \n",
		"toolkit's spec unchanged",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the examples' output lacks %q", want)
		}
	}
	if strings.Contains(out, "exit ") {
		t.Errorf("an example failed:\n%s", out)
	}
}
