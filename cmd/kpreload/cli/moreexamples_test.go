package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"
	"github.com/kpreload/kpreload/report"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestCopyInHelpExamples runs the example of copy-in exactly as written, in
// a directory holding ./rootfs (whose /usr/local is a link, absolute, to
// /usr: followed inside the root) and ./tree, the unpacked files.
func TestCopyInHelpExamples(t *testing.T) {
	t.Chdir(t.TempDir())
	clitest.MustWrite(t, "rootfs/usr/bin/.keep", "")
	if err := os.Symlink("/usr", "rootfs/usr/local"); err != nil {
		t.Fatal(err)
	}
	clitest.MustWrite(t, "tree/usr/local/bin/kpreload", "binary")
	clitest.MustWrite(t, "tree/etc/kpreload/instance.yaml", "resources: {}\n")
	lines := examplesOf(t, "kpreload copy-in")
	for _, l := range lines {
		if code, out, errOut := runCLI(strings.Fields(l)[1:]...); code != 0 {
			t.Fatalf("example %q: exit %d: %s%s", l, code, out, errOut)
		}
	}
	for p, want := range map[string]string{"rootfs/usr/bin/kpreload": "binary", "rootfs/etc/kpreload/instance.yaml": "resources: {}\n"} {
		if b, err := os.ReadFile(p); err != nil || string(b) != want {
			t.Errorf("after %q, %s holds %q (%v), want %q", lines, p, b, err, want)
		}
	}
	if len(lines) != 1 {
		t.Errorf("copy-in examples %q; the test knows one", lines)
	}
}

// TestUserDataHelpExamples runs the examples of user-data apply exactly as
// written in a checkout: the documented user-data (version "550") over the
// committed H200 and H100 captures and the plan bundle, each a dry run that
// would switch to nvidia 550.163.01. docs/driver-selection.md shows the
// first.
func TestUserDataHelpExamples(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/driver-selection.md")
	if err != nil {
		t.Fatal(err)
	}
	inCheckout(t)
	lines := examplesOf(t, "kpreload user-data apply")
	if !strings.Contains(string(doc), "\n"+lines[0]+"\n") {
		t.Errorf("docs/driver-selection.md does not show %q", lines[0])
	}
	for _, l := range lines {
		out := runLine(t, l)
		if strings.HasSuffix(l, " --json") {
			var rec report.UserData
			if err := json.Unmarshal([]byte(out), &rec); err != nil || rec.Action != "would-switch" || rec.Driver+" "+rec.To != "nvidia 550.163.01" {
				t.Errorf("%s printed %s (%v); want would-switch to nvidia 550.163.01", l, out, err)
			}
			continue
		}
		if want := "kpreload user-data: would-switch: the user-data asks for 550.163.01 (branch 550): apply would switch to nvidia 550.163.01 open (dry run: nothing changed)\n"; out != want {
			t.Errorf("%s printed %q, want %q", l, out, want)
		}
	}
	if len(lines) != 2 {
		t.Errorf("user-data apply examples %q; the test knows 2", lines)
	}
}

// TestInitramfsHelpExamples runs the examples of initramfs exactly as
// written, with kpreload and kpreload-init built beside each other as make
// builds them, in a directory where ./6.1.0-56-cloud-amd64 links to that
// kernel's unpacked tree (as the help says) and ./cache holds one set for it
// (a synthetic module): the second carries that set, and no xfs module.
func TestInitramfsHelpExamples(t *testing.T) {
	const kver = "6.1.0-56-cloud-amd64"
	tree := testenv.KernelTree(t, kver)
	bin := t.TempDir()
	kpreload := testenv.GoBuildStatic(t, bin, "kpreload", "./cmd/kpreload")
	testenv.GoBuildStatic(t, bin, "kpreload-init", "./cmd/kpreload-init")
	ko := testenv.SyntheticModule(t, "kpreload_syn", kver)
	t.Chdir(t.TempDir())
	if err := os.Symlink(tree, kver); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCLI("cache", "add", "--cache", "./cache", "--driver", "kpreload-syn", "--version", "1.0", ko); code != 0 {
		t.Fatalf("cache add: exit %d: %s%s", code, out, errOut)
	}
	lines := examplesOf(t, "kpreload initramfs")
	for _, l := range lines {
		out, err := exec.Command(kpreload, strings.Fields(l)[1:]...).Output()
		if err != nil {
			t.Fatalf("example %q: %v\n%s", l, err, out)
		}
		files := testenv.InitramfsFiles(t, "initrd.img")
		if _, ok := files["init"]; !ok {
			t.Errorf("example %q: initrd.img has no /init", l)
		}
		if !strings.Contains(l, "--json") {
			// One set: the kernel's own modules.
			if !strings.HasPrefix(string(out), "initrd.img: ") || !strings.Contains(string(out), " modules, 1 sets, ") {
				t.Errorf("example %q printed %q, want initrd.img's summary, the kernel's set alone", l, out)
			}
			continue
		}
		var res struct {
			Modules []string `json:"modules"`
			Sets    []string `json:"sets"`
		}
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("example %q: %v\n%s", l, err, out)
		}
		if len(res.Sets) != 2 || !slices.Contains(res.Modules, "kpreload_syn") || slices.Contains(res.Modules, "xfs") {
			t.Errorf("example %q: sets %q, modules %q; want the kernel's and the cache's set, kpreload_syn and no xfs", l, res.Sets, res.Modules)
		}
	}
	if len(lines) != 2 {
		t.Errorf("initramfs examples %q; the test knows 2", lines)
	}
}
