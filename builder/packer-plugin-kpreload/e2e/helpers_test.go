package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/internal/version"
	"github.com/kpreload/kpreload/testsupport/boottest"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// The Packer releases the tests run, each built by scripts/packer.sh
// (PACKER_VERSION) and cached side by side under $KPRELOAD_CACHE/packer/.
const (
	// PackerVersion is what users download today (BUSL-licensed) and
	// scripts/packer.sh's default: every template, build and boot here.
	PackerVersion = "1.15.0"
	// MPLPackerVersion is the last MPL-licensed release, kept working by one
	// cheap check (TestMPLPacker).
	MPLPackerVersion = "1.9.4"
	// QEMUPluginVersion is the packer-plugin-qemu release scripts/packer.sh
	// builds (PACKER_QEMU_VERSION's default): Packer 1.10 and later no longer
	// bundle the QEMU builder; this is the one 1.9.4 bundled.
	QEMUPluginVersion = "1.0.9"
)

var (
	packerMu   sync.Mutex
	packerBins = map[string]string{}

	pluginOnce sync.Once
	pluginDir  string
	pluginErr  error

	qemuOnce sync.Once
	qemuErr  error

	moduleCacheOnce sync.Once
	moduleCacheDir  string
	moduleCacheErr  error
)

// TestMain removes the package's shared module cache and Packer plugin
// directory after its tests.
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

// packerBinary returns the real Packer of PackerVersion.
func packerBinary(t testing.TB) string {
	t.Helper()
	return packerOf(t, PackerVersion)
}

// packerCommand is the command, as docs/packer.md shows it, that installs
// Packer of the given version and prints its path.
func packerCommand(version string) string {
	if version == PackerVersion {
		return "scripts/packer.sh"
	}
	return "PACKER_VERSION=" + version + " scripts/packer.sh"
}

// packerOf returns the real Packer of the given version: what
// packerCommand(version) prints, run as written in the repository root (it
// builds and installs that Packer the first time, several minutes; later
// calls only print the path).
func packerOf(t testing.TB, version string) string {
	t.Helper()
	testenv.SkipShort(t, "runs the real Packer (scripts/packer.sh downloads and builds it)")
	packerMu.Lock()
	defer packerMu.Unlock()
	if p, ok := packerBins[version]; ok {
		return p
	}
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", packerCommand(version))
	cmd.Dir = repoRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("install Packer %s: %s: %v\n%s", version, packerCommand(version), err, lastLines(stderr.String(), 20))
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	p := lines[len(lines)-1]
	if want := filepath.Join(testenv.CacheRoot(), "packer", version, "packer"); p != want {
		t.Fatalf("%s printed %q, want %s", packerCommand(version), p, want)
	}
	packerBins[version] = p
	return p
}

// pluginFlow is the documented way to install the plugin and build the CI
// image (docs/packer.md's block that starts with `make plugin`, shown the same
// in README.md), split where the installation ends (after `packer plugins
// installed`) and the template's init, validate and build begin. The line that
// puts Packer on PATH starts both parts.
type pluginFlow struct {
	install, build string
}

// documentedFlow reads the flow from docs/packer.md and checks that README.md
// shows the same lines.
func documentedFlow(t testing.TB) pluginFlow {
	t.Helper()
	block := func(file string) []string {
		b, err := os.ReadFile(filepath.Join(repoRoot(t), file))
		if err != nil {
			t.Fatal(err)
		}
		_, rest, ok := strings.Cut(string(b), "```sh\nmake plugin\n")
		if !ok {
			t.Fatalf("%s has no ```sh block that starts with `make plugin`", file)
		}
		body, _, ok := strings.Cut(rest, "```")
		if !ok {
			t.Fatalf("%s: the block that starts with `make plugin` does not end", file)
		}
		return append([]string{"make plugin"}, strings.Split(strings.TrimSpace(body), "\n")...)
	}
	lines := block("docs/packer.md")
	if readme := block("README.md"); !slices.Equal(readme, lines) {
		t.Fatalf("README.md's plugin flow\n%s\ndiffers from docs/packer.md's\n%s", strings.Join(readme, "\n"), strings.Join(lines, "\n"))
	}
	i := slices.Index(lines, "packer plugins installed")
	if i < 2 || !strings.HasPrefix(lines[1], "export PATH=") || !strings.HasPrefix(lines[len(lines)-1], "packer build ") {
		t.Fatalf("docs/packer.md's plugin flow is not `make plugin`, `export PATH=…`, the install, `packer plugins installed`, …, `packer build …`:\n%s", strings.Join(lines, "\n"))
	}
	return pluginFlow{
		install: strings.Join(lines[:i+1], "\n"),
		build:   strings.Join(append([]string{lines[1]}, lines[i+1:]...), "\n"),
	}
}

// packerEnv is the environment every Packer run of the package gets: the
// package's own plugin and configuration directories (nothing under the
// user's ~/.config/packer), no update checks, no colour.
func packerEnv(dir string) []string {
	return append(os.Environ(),
		"PACKER_PLUGIN_PATH="+filepath.Join(dir, "plugins"),
		"PACKER_CONFIG_DIR="+filepath.Join(dir, "config"),
		"CHECKPOINT_DISABLE=1",
		"PACKER_NO_COLOR=1",
	)
}

// runScript runs a shell script as the documentation writes it, in the
// repository root, with env, and returns its combined output.
func runScript(ctx context.Context, t testing.TB, script string, env []string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = repoRoot(t)
	cmd.Env = env
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// installedPlugin is where `packer plugins install --path` puts a plugin
// binary of the given source and version under a plugin directory.
func installedPlugin(pluginPath, source, name, version string) string {
	return filepath.Join(pluginPath, source, fmt.Sprintf("packer-plugin-%s_v%s_x5.0_%s_%s", name, version, runtime.GOOS, runtime.GOARCH))
}

// plugins installs the plugin, once per test run, the documented way (the
// install part of documentedFlow: `make plugin`, then `packer plugins install
// --path bin/packer-plugin-kpreload github.com/kpreload/kpreload` into a
// plugin directory of the package's own), checks that `packer plugins
// installed` lists it under the version the plugin reports, and returns the
// directory that holds the package's plugins/ and config/ (packerEnv). The
// installed plugin finds bin/kpreload and bin/kpreload-init of the repository
// root, where every Packer run of the package starts.
func plugins(t testing.TB) string {
	t.Helper()
	packerBinary(t)
	pluginOnce.Do(func() {
		if pluginDir, pluginErr = os.MkdirTemp("", "kpreload-packer-"); pluginErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 10*time.Minute))
		defer cancel()
		out, err := runScript(ctx, t, documentedFlow(t).install, packerEnv(pluginDir))
		if err != nil {
			pluginErr = fmt.Errorf("the documented plugin install: %w\n%s", err, lastLines(out, 30))
			return
		}
		want := installedPlugin(filepath.Join(pluginDir, "plugins"), "github.com/kpreload/kpreload", "kpreload", version.Release)
		if !strings.Contains(out, want) {
			pluginErr = fmt.Errorf("packer plugins installed does not list %s:\n%s", want, lastLines(out, 30))
		}
	})
	if pluginErr != nil {
		t.Fatal(pluginErr)
	}
	return pluginDir
}

// qemuPlugin installs Packer's QEMU plugin into the package's plugin directory
// with `scripts/packer.sh --qemu --install` (built from the module proxy, then
// `packer plugins install --path`), once per test run.
func qemuPlugin(t testing.TB) {
	t.Helper()
	dir := plugins(t)
	qemuOnce.Do(func() {
		cmd := exec.Command("bash", filepath.Join(repoRoot(t), "scripts", "packer.sh"), "--qemu", "--install")
		cmd.Env = append(packerEnv(dir), "PACKER_VERSION="+PackerVersion, "PACKER_QEMU_VERSION="+QEMUPluginVersion)
		out, err := cmd.CombinedOutput()
		if err != nil {
			qemuErr = fmt.Errorf("scripts/packer.sh --qemu --install: %w\n%s", err, lastLines(string(out), 20))
			return
		}
		want := installedPlugin(filepath.Join(dir, "plugins"), "github.com/hashicorp/qemu", "qemu", QEMUPluginVersion)
		if _, err := os.Stat(want); err != nil {
			qemuErr = fmt.Errorf("the QEMU plugin is not where Packer installs it: %w\n%s", err, lastLines(string(out), 20))
		}
	})
	if qemuErr != nil {
		t.Fatal(qemuErr)
	}
}

// packerRun runs the real Packer (PackerVersion) in the repository root with
// the package's plugin directory and returns its combined output.
func packerRun(ctx context.Context, t testing.TB, args ...string) (string, error) {
	t.Helper()
	return packerRunWith(ctx, t, packerBinary(t), args...)
}

// packerRunWith is packerRun with a given Packer binary.
func packerRunWith(ctx context.Context, t testing.TB, packer string, args ...string) (string, error) {
	t.Helper()
	dir := plugins(t)
	cmd := exec.CommandContext(ctx, packer, args...)
	cmd.Dir = repoRoot(t)
	cmd.Env = packerEnv(dir)
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
