package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/testsupport/boottest"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// PackerVersion is the Packer release the tests run (scripts/packer.sh's default).
const PackerVersion = "1.9.4"

var (
	packerOnce sync.Once
	packerPath string
	packerErr  error

	pluginOnce sync.Once
	pluginDir  string
	pluginErr  error

	moduleCacheOnce sync.Once
	moduleCacheDir  string
	moduleCacheErr  error
)

// TestMain removes the package's shared module cache and plugin directory
// after its tests.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range []string{moduleCacheDir, pluginDir} {
		if d != "" {
			os.RemoveAll(d)
		}
	}
	os.Exit(code)
}

// moduleCache returns the module cache directory (cache_dir) that this
// package's builds of the test driver for 6.1.0-56-cloud-amd64 share: the
// first test that needs the cell runs the real dkms build into it (its cache
// is empty at the start of every test run), the later ones take the built
// cell from it, as a second build on one machine does, instead of running the
// same dkms build three times.
func moduleCache(t testing.TB) string {
	t.Helper()
	moduleCacheOnce.Do(func() {
		moduleCacheDir, moduleCacheErr = os.MkdirTemp("", "kpreload-packer-cache-")
	})
	if moduleCacheErr != nil {
		t.Fatal(moduleCacheErr)
	}
	return moduleCacheDir
}

// root is the repository's root directory, taken when the test binary starts
// (tests may change directory later).
var root, rootErr = filepath.Abs("../../..")

// repoRoot is the repository's root directory.
func repoRoot(t testing.TB) string {
	t.Helper()
	if rootErr != nil {
		t.Fatal(rootErr)
	}
	return root
}

// packerBinary returns the real Packer: $KPRELOAD_PACKER if set, else what
// scripts/packer.sh prints (it builds and installs Packer the first time,
// several minutes; later calls only print the path).
func packerBinary(t testing.TB) string {
	t.Helper()
	testenv.SkipShort(t, "runs the real Packer (scripts/packer.sh downloads and builds it)")
	packerOnce.Do(func() {
		if p := os.Getenv("KPRELOAD_PACKER"); p != "" {
			packerPath = p
			return
		}
		cmd := exec.Command("bash", filepath.Join(repoRoot(t), "scripts", "packer.sh"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			packerErr = fmt.Errorf("scripts/packer.sh: %w\n%s", err, lastLines(stderr.String(), 20))
			return
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		packerPath = lines[len(lines)-1]
	})
	if packerErr != nil {
		t.Fatalf("install Packer: %v", packerErr)
	}
	return packerPath
}

// plugins builds, once per test run, a PACKER_PLUGIN_PATH directory holding
// packer-plugin-kpreload from this tree and, next to it, the static kpreload
// CLI and /init the plugin finds there by default. Each is built as the
// Makefile builds it (CGO_ENABLED=0, -trimpath; the binaries that go into
// images also stripped), so that `make test` compiles none of their packages
// again.
func plugins(t testing.TB) string {
	t.Helper()
	pluginOnce.Do(func() {
		if pluginDir, pluginErr = os.MkdirTemp("", "kpreload-packer-plugins-"); pluginErr != nil {
			return
		}
		static := []string{"-trimpath", "-ldflags", "-s -w"}
		for _, b := range []struct {
			out, pkg string
			flags    []string
			env      []string
		}{
			{"packer-plugin-kpreload", "./cmd/packer-plugin-kpreload", []string{"-trimpath"}, []string{"CGO_ENABLED=0"}},
			{"kpreload", "./cmd/kpreload", static, []string{"CGO_ENABLED=0"}},
			{"kpreload-init", "./initramfs/cmd/init", static, []string{"CGO_ENABLED=0"}},
		} {
			args := append(append([]string{"build"}, b.flags...), "-o", filepath.Join(pluginDir, b.out), b.pkg)
			cmd := exec.Command("go", args...)
			cmd.Dir = repoRoot(t)
			cmd.Env = append(os.Environ(), b.env...)
			if out, err := cmd.CombinedOutput(); err != nil {
				pluginErr = fmt.Errorf("go build %s: %w\n%s", b.pkg, err, out)
				return
			}
		}
	})
	if pluginErr != nil {
		t.Fatal(pluginErr)
	}
	return pluginDir
}

// packerRun runs the real Packer in the repository root with the plugin
// directory on PACKER_PLUGIN_PATH and returns its combined output.
func packerRun(ctx context.Context, t testing.TB, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, packerBinary(t), args...)
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(),
		"PACKER_PLUGIN_PATH="+plugins(t),
		"CHECKPOINT_DISABLE=1",
		"PACKER_NO_COLOR=1",
	)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// machineReadable parses `packer -machine-readable` output into its
// (target, type, data...) records, with Packer's escapes undone.
func machineReadable(out string) [][]string {
	var recs [][]string
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Split(sc.Text(), ",")
		if len(f) < 3 {
			continue
		}
		for i := range f {
			f[i] = strings.NewReplacer("%!(PACKER_COMMA)", ",", `\n`, "\n", `\r`, "\r").Replace(f[i])
		}
		recs = append(recs, f[1:])
	}
	return recs
}

// artifactFiles returns the files of the first artifact in machine-readable output.
func artifactFiles(recs [][]string) []string {
	var files []string
	for _, r := range recs {
		// target, "artifact", index, "file", n, path
		if len(r) >= 6 && r[1] == "artifact" && r[2] == "0" && r[3] == "file" {
			files = append(files, r[5])
		}
	}
	return files
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// checkDriverBound checks a boot of a kpreload image: kpreload's report came
// back for kernel with cmdline in its command line, and the test driver was
// loaded and bound to QEMU's edu device before the real init started.
func checkDriverBound(t *testing.T, res *qemu.Result, kernel, cmdline string) {
	t.Helper()
	rep := res.Report
	if rep == nil {
		t.Fatalf("no kpreload report on the report channel; warnings %v; console %s", res.Warnings, res.Console)
	}
	t.Logf("report: %s", rep.Summary())
	if rep.Kernel != kernel || !strings.Contains(rep.Cmdline, cmdline) {
		t.Errorf("report kernel %q cmdline %q: want %s booted by the image's boot entry (%s)", rep.Kernel, rep.Cmdline, kernel, cmdline)
	}
	if rep.SwitchRoot <= 0 {
		t.Errorf("report switch_root = %v, want the time /init handed over to /sbin/init", rep.SwitchRoot)
	}
	boottest.CheckEduLoaded(t, rep, "")
	// The probe's kernel line and systemd's first line carry the same (printk)
	// clock: the driver was bound before the real init ran. (The report's
	// switch_root comes from another clock, which drifts from printk's under
	// TCG by a few milliseconds, so it is not compared with kernel lines.)
	probe, ok := qemu.Find(res.Kernel, "bound, id 0x010000ed")
	// systemd's start line where it logs to the kernel (bookworm's does);
	// else its first target, which the real init reached after it started
	// (trixie's systemd writes its start line to the console without a
	// printk time).
	systemd, sok := qemu.Find(res.Kernel, "running in system mode")
	if !sok {
		systemd, sok = qemu.Find(res.Kernel, "Reached target ")
	}
	if !ok || !sok || probe.Time >= systemd.Time {
		t.Errorf("test driver probe line %+v (found %v), systemd's start %+v (found %v): want the probe logged before the real init ran", probe, ok, systemd, sok)
	}
}
