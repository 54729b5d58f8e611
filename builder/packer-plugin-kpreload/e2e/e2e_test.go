package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/image"
	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/internal/version"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// templates are the templates shipped in images/, relative to the repository root.
var templates = []string{"images/ci-testdriver.pkr.hcl", "images/debian12-gpu.pkr.hcl", "images/debian13-gpu.pkr.hcl"}

// TestValidateTemplates runs the real `packer validate` on every template
// (the plugin's Prepare through Packer's RPC), and checks that a bad kernel and
// an existing output directory are refused with messages that say why.
func TestValidateTemplates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 5*time.Minute))
	defer cancel()
	for _, tmpl := range templates {
		out, err := packerRun(ctx, t, "validate", "-var", "output_directory="+filepath.Join(t.TempDir(), "out"), tmpl)
		if err != nil || !strings.Contains(out, "The configuration is valid.") {
			t.Errorf("packer validate %s: %v\n%s", tmpl, err, out)
		}
	}

	existing := t.TempDir()
	out, err := packerRun(ctx, t, "validate",
		"-var", "output_directory="+existing,
		"-var", "kernel=6.1.0-99-cloud-amd64",
		"images/ci-testdriver.pkr.hcl")
	if err == nil {
		t.Fatalf("packer validate accepted a kernel outside the recipe's matrix:\n%s", out)
	}
	for _, want := range []string{
		"kernel 6.1.0-99-cloud-amd64 is not in recipe testdriver's kernel matrix",
		"releases 6.1.0-56-cloud-amd64, 6.12.117+deb12-cloud-amd64, 6.12.118+deb13-cloud-amd64",
		"output_directory " + existing + " already exists",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("packer validate output lacks %q:\n%s", want, out)
		}
	}
}

// TestDocumentedPackerCommands checks that docs/packer.md shows the commands
// the tests run to install each Packer (packerCommand), and that README.md and
// docs/packer.md show the same plugin flow, which plugins and
// TestBuildAndBootCITestdriver run as written.
func TestDocumentedPackerCommands(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "packer.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{PackerVersion, MPLPackerVersion} {
		re := regexp.MustCompile(`(?m)^    ` + regexp.QuoteMeta(packerCommand(v)) + `\s+# /var/cache/kpreload/packer/` + regexp.QuoteMeta(v) + `/packer$`)
		if !re.Match(b) {
			t.Errorf("docs/packer.md does not show %q (printing Packer %s's path)", packerCommand(v), v)
		}
	}
	flow := documentedFlow(t)
	for _, want := range []string{
		"packer plugins install --path bin/packer-plugin-kpreload github.com/kpreload/kpreload",
		"packer init images/ci-testdriver.pkr.hcl",
		"packer validate images/ci-testdriver.pkr.hcl",
		"packer build images/ci-testdriver.pkr.hcl",
	} {
		if !strings.Contains(flow.install+"\n"+flow.build, "\n"+want+"\n") && !strings.HasSuffix(flow.build, "\n"+want) {
			t.Errorf("the documented flow lacks the line %q:\n%s\n%s", want, flow.install, flow.build)
		}
	}
}

// TestMPLPacker is the one cheap check of MPLPackerVersion, the last
// MPL-licensed Packer: with the plugin directory that PackerVersion's
// `packer plugins install --path` wrote (the same layout: source path, a
// versioned binary and its _SHA256SUM), it lists the plugin as installed and
// validates the CI template, required_plugins block included, with no
// `packer init`.
func TestMPLPacker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 5*time.Minute))
	defer cancel()
	packer := packerOf(t, MPLPackerVersion)
	want := installedPlugin(filepath.Join(plugins(t), "plugins"), "github.com/kpreload/kpreload", "kpreload", version.Release)
	out, err := packerRunWith(ctx, t, packer, "plugins", "installed")
	if err != nil || !strings.Contains(out, want) {
		t.Errorf("packer %s plugins installed: %v; want %s listed:\n%s", MPLPackerVersion, err, want, out)
	}
	out, err = packerRunWith(ctx, t, packer, "validate", "-var", "output_directory="+filepath.Join(t.TempDir(), "out"), "images/ci-testdriver.pkr.hcl")
	if err != nil || !strings.Contains(out, "The configuration is valid.") {
		t.Errorf("packer %s validate images/ci-testdriver.pkr.hcl: %v\n%s", MPLPackerVersion, err, out)
	}
}

// defaultTarget is what systemd prints when it reaches the image's default
// target, or the serial getty's login prompt. systemd prints no status while
// a unit is on the console (the serial getty on ttyS0, the console here), so
// on a loaded host, where the getty can start before the last units of
// multi-user.target finish, the target's line never comes (seen: the prompt
// at 105 s, then nothing for 8 minutes).
var defaultTarget = regexp.MustCompile(`Reached target .*(Multi-User System|Graphical Interface)|\n\S+ login: `)

// firstTarget is systemd's first "Reached target" line in the kernel's log
// (a printk-timed console line, which checkDriverBound compares with the
// driver's probe), not its status line on the console.
var firstTarget = regexp.MustCompile(`(?m)^\[\s*\d+\.\d+\] .*Reached target `)

// TestBuildAndBootCITestdriver runs the real `packer build` of
// images/ci-testdriver.pkr.hcl with the package's shared module cache (the
// real dkms builds the test driver: trixie's cell always, since no other test
// builds it; bookworm's unless an earlier test of this run built the same
// cell) and, for trixie, a fresh root filesystem cache (mmdebstrap
// runs under the plugin, against the Debian archive; bookworm's build takes
// the machine's root filesystem cache, which the image tests share, so one
// mmdebstrap of the same tarball is not run again), then boots the produced qcow2 in QEMU through OVMF and the
// image's systemd-boot with -device edu: /init's report shows kpreload_edu
// loaded and the device bound before switch_root to /sbin/init, and systemd
// reaches its default target (trixie's boot ends at systemd's first target). Bookworm's build is the documented flow run as
// written (docs/packer.md and README.md: `packer init`, `packer validate`,
// `packer build images/ci-testdriver.pkr.hcl`, the template's variables set
// through PKR_VAR_ in the environment); trixie's adds -var suite=trixie and
// -machine-readable, whose artifact records give the files in their order.
func TestBuildAndBootCITestdriver(t *testing.T) {
	if testing.Short() {
		t.Skip("real packer build (mmdebstrap, dkms) and a UEFI boot under TCG; -short")
	}
	for _, tc := range []struct {
		suite, kernel, welcome string
		documented             bool
	}{
		{"bookworm", "6.1.0-56-cloud-amd64", "Debian GNU/Linux 12", true},
		// -var suite=trixie: the template defaults to trixie's cloud kernel,
		// the test driver is built in the trixie build root (gcc-14).
		{"trixie", "6.12.118+deb13-cloud-amd64", "Debian GNU/Linux 13", false},
	} {
		t.Run(tc.suite, func(t *testing.T) {
			buildAndBootCITestdriver(t, tc.suite, tc.kernel, tc.welcome, tc.documented)
		})
	}
}

// buildAndBootCITestdriver is TestBuildAndBootCITestdriver for one suite;
// documented runs docs/packer.md's flow as written with the machine's root
// filesystem cache, else `packer build -machine-readable -var …` with an
// empty root filesystem cache of its own, so that mmdebstrap runs under the
// plugin.
func buildAndBootCITestdriver(t *testing.T, suite, kernel, welcome string, documented bool) {
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 40*time.Minute))
	defer cancel()
	outDir := filepath.Join(t.TempDir(), "out")
	cache := moduleCache(t)
	want := []string{
		filepath.Join(outDir, "ci-testdriver.raw"),
		filepath.Join(outDir, "ci-testdriver.qcow2"),
		filepath.Join(outDir, "ci-testdriver.manifest.json"),
	}

	start := time.Now()
	if documented {
		flow := documentedFlow(t)
		out, err := runScript(ctx, t, flow.build, append(packerEnv(plugins(t)),
			"PKR_VAR_output_directory="+outDir,
			"PKR_VAR_cache_dir="+cache,
			"PKR_VAR_suite="+suite))
		if err != nil {
			t.Fatalf("the documented flow\n%s\nfailed: %v\n%s", flow.build, err, lastLines(out, 40))
		}
		for _, w := range []string{
			"The configuration is valid.",
			"Builds finished. The artifacts of successful builds are:",
			"--> kpreload.ci-testdriver: ",
		} {
			if !strings.Contains(out, w) {
				t.Errorf("the documented flow's output lacks %q:\n%s", w, lastLines(out, 40))
			}
		}
		ents, err := os.ReadDir(outDir)
		if err != nil {
			t.Fatal(err)
		}
		var files []string
		for _, e := range ents {
			files = append(files, filepath.Join(outDir, e.Name()))
		}
		if wantSorted := slices.Sorted(slices.Values(want)); !slices.Equal(files, wantSorted) {
			t.Fatalf("output directory holds %q, want %q", files, wantSorted)
		}
	} else {
		out, err := packerRun(ctx, t, "build", "-machine-readable",
			"-var", "output_directory="+outDir,
			"-var", "cache_dir="+cache,
			"-var", "rootfs_cache_dir="+filepath.Join(t.TempDir(), "rootfs"),
			"-var", "suite="+suite,
			"images/ci-testdriver.pkr.hcl")
		recs := machineReadable(out)
		if err != nil {
			var ui []string
			for _, r := range recs {
				if len(r) >= 3 && r[1] == "ui" {
					ui = append(ui, r[len(r)-1])
				}
			}
			t.Fatalf("packer build: %v\n%s", err, lastLines(strings.Join(ui, "\n"), 40))
		}
		if files := artifactFiles(recs); !slices.Equal(files, want) {
			t.Fatalf("artifact files = %q, want %q", files, want)
		}
	}
	t.Logf("packer build took %s", time.Since(start).Round(time.Second))
	for _, f := range want {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Errorf("artifact file %s: %v", f, err)
		}
	}
	m, err := image.ReadManifest(want[2])
	if err != nil {
		t.Fatal(err)
	}
	if !documented && m.Rootfs.Cached {
		t.Errorf("manifest says the root filesystem came from a cache; want mmdebstrap run by this build")
	}
	t.Logf("root filesystem from the cache: %v (fresh cache: %v)", m.Rootfs.Cached, !documented)
	if len(m.Drivers) != 1 || m.Drivers[0].Recipe != "testdriver" || m.Drivers[0].Kernel != kernel {
		t.Errorf("manifest drivers = %+v, want the testdriver set for %s", m.Drivers, kernel)
	}
	if m.Suite != suite {
		t.Errorf("manifest suite = %q, want %q", m.Suite, suite)
	}
	if !strings.Contains(m.Cmdline, "kpreload.report=/dev/ttyS1") || !strings.Contains(m.Cmdline, "root=UUID="+m.RootUUID) {
		t.Errorf("manifest cmdline %q: want root=UUID=%s and the template's kernel_cmdline", m.Cmdline, m.RootUUID)
	}

	// Boot a copy-on-write overlay, so the artifact itself stays as built.
	overlay := filepath.Join(t.TempDir(), "boot.qcow2")
	if b, err := exec.CommandContext(ctx, "qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", want[1], overlay).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create overlay: %v\n%s", err, b)
	}
	// The documented build boots to systemd's default target. The other
	// suite's boot ends at systemd's first target: the driver bound before
	// the real init (trixie's systemd logs no printk-timed start line, so
	// checkDriverBound compares the probe with that first target) and the
	// suite's own systemd started are what it adds, and the rest of a trixie
	// userspace under TCG is the cloud-init image's boot (builder/image
	// TestCloudInitImage).
	until, what := defaultTarget, "its default target"
	if !documented {
		until, what = firstTarget, "systemd's first target"
	}
	res, err := (&qemu.Runner{WorkDir: t.TempDir()}).Run(ctx, qemu.Config{
		Firmware: qemu.FirmwareUEFI,
		RootDisk: overlay,
		Devices:  []string{"edu"},
		Until:    until,
		Timeout:  testenv.Deadline(t, 480*time.Second),
	})
	if err != nil {
		t.Fatalf("UEFI boot of the packer-built image: %v", err)
	}
	t.Logf("booted to %q in %s", res.UntilMatch, res.Duration.Round(time.Second))
	if !res.UntilMatched {
		t.Fatalf("the boot did not reach %s; console %s", what, res.Console)
	}
	checkDriverBound(t, res, kernel, "root=UUID="+m.RootUUID)
	console, err := os.ReadFile(res.Console)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(console), welcome) {
		t.Errorf("console lacks the systemd welcome of %s (%s)", welcome, res.Console)
	}
}

// TestDefaultTarget checks what ends the boot: the default target's line or
// the serial getty's prompt (after which systemd prints no status).
func TestDefaultTarget(t *testing.T) {
	for _, tc := range []struct {
		console string
		want    bool
	}{
		{"[  OK  ] Reached target \x1b[0;1;39mmulti-user.target\x1b[0m - Multi-User System.\r\n", true},
		{"[  OK  ] Reached target graphical.target - Graphical Interface.\r\n", true},
		{"Debian GNU/Linux 12 kpreload ttyS0\r\n\r\nkpreload login: [  105.241807] kvm: Nested Virtualization enabled\r\n", true},
		{"[  OK  ] Reached target \x1b[0;1;39mgetty.target\x1b[0m - Login Prompts.\r\n", false},
		{"[  OK  ] Started serial-getty@ttyS0.service - Serial Getty on ttyS0.\r\n", false},
	} {
		if got := defaultTarget.MatchString(tc.console); got != tc.want {
			t.Errorf("defaultTarget.MatchString(%q) = %v, want %v", tc.console, got, tc.want)
		}
	}
}
