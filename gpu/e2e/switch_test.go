// Package e2e proves kpreload switch in a real VM: a Debian cloud kernel boots in
// QEMU with a kpreload initramfs, a root disk whose module cache holds three
// versions of the project's test driver (built by the real dkms; the third one
// damaged on purpose) and the static kpreload binary; the root's test init runs
// kpreload switch there and back and into the damaged version, and the test reads
// what each command printed and what the kernel logged.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/testsupport/testenv"

	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/builder/rootdisk"
	"github.com/kpreload/kpreload/gpu/switcher"
	"github.com/kpreload/kpreload/initramfs/assemble"
	"github.com/kpreload/kpreload/initramfs/rootinit/run"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
)

const (
	kernel   = "6.1.0-56-cloud-amd64"
	rootUUID = "0b7c6a52-3d1e-4f8a-9c2b-5e6f7a8b9c0d"
)

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// buildCache compiles versions 1.0.0 and 2.0.0 of the test driver (the project's
// recipes) and 3.0.0 (a recipe made here from the same source) with the real dkms
// into a cache, then damages 3.0.0's module file so its digest no longer matches.
func buildCache(t *testing.T, dir, kpreload string) (string, map[string]string) {
	t.Helper()
	recipes := filepath.Join(testenv.RepoRoot(t), "recipes")
	v3 := filepath.Join(dir, "recipe3")
	src := filepath.Join(v3, "testdriver-3")
	for _, f := range []string{"Makefile", "kpreload_edu.c"} {
		if err := os.MkdirAll(src, 0o755); err != nil {
			t.Fatal(err)
		}
		// A copy: a recipe's source may not link out of its directory.
		b, err := os.ReadFile(filepath.Join(recipes, "testdriver", f))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(src, f), string(b), 0o644)
	}
	conf, err := os.ReadFile(filepath.Join(recipes, "testdriver-2", "dkms.conf"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(src, "dkms.conf"), strings.ReplaceAll(string(conf), `PACKAGE_VERSION="2.0.0"`, `PACKAGE_VERSION="3.0.0"`), 0o644)
	writeFile(t, filepath.Join(v3, "testdriver-3.yaml"), `name: testdriver-3
driver:
  name: kpreload-edu
  version: 3.0.0
flavor: open
source:
  dir: testdriver-3
modules: [kpreload_edu]
kernels:
  releases: [`+kernel+`]
`, 0o644)

	cache := filepath.Join(dir, "cache")
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 15*time.Minute))
	defer cancel()
	cmd := exec.CommandContext(ctx, kpreload, "build", filepath.Join(recipes, "testdriver.yaml"), filepath.Join(recipes, "testdriver-2.yaml"),
		filepath.Join(v3, "testdriver-3.yaml"), "--kernel", kernel, "--cache", cache)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kpreload build: %v\n%s", err, out)
	}
	idx, err := bootindex.Read(filepath.Join(cache, "index", kernel+".json"))
	if err != nil {
		t.Fatal(err)
	}
	versions := map[string]string{} // set ID -> version
	for _, s := range idx.Sets {
		versions[s.ID] = s.Version
		if s.Version != "3.0.0" {
			continue
		}
		for _, m := range s.Modules {
			p := filepath.Join(cache, "index", s.Dir, m.Path)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0xff
			if err := os.Chmod(p, 0o644); err != nil {
				t.Fatal(err)
			}
			writeFile(t, p, string(b), 0o444)
		}
	}
	if len(versions) != 3 {
		t.Fatalf("cache index for %s has sets %v, want 1.0.0, 2.0.0 and 3.0.0", kernel, versions)
	}
	return cache, versions
}

// step is one kpreload switch the VM runs and whether it must succeed.
type step struct {
	version string
	ok      bool
}

var steps = []step{{"1.0.0", true}, {"2.0.0", true}, {"3.0.0", false}, {"1.0.0", true}}

var boundLine = regexp.MustCompile(`kpreload_edu ([0-9a-f:.]+): bound, id 0x[0-9a-f]+, driver version (\S+)`)

// TestSwitchInVM boots with one version bound, then switches to the other and back
// and into a damaged version, which must be refused and rolled back.
func TestSwitchInVM(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM (about a minute); run without -short")
	}
	dir := t.TempDir()
	ktree := testenv.KernelTree(t, kernel)
	bins := filepath.Join(dir, "bin")
	initBin := testenv.GoBuildStatic(t, bins, "kpreload-init", "./cmd/kpreload-init")
	rootInit := testenv.GoBuildStatic(t, bins, "kpreload-rootinit", "./cmd/kpreload-rootinit")
	kpreload := testenv.GoBuildStatic(t, bins, "kpreload", "./cmd/kpreload")
	cache, versions := buildCache(t, dir, kpreload)

	// The root: the cache, the binary, userspace directories for 1.0.0 and 2.0.0
	// (3.0.0 has none) and the command list the test init runs.
	stage := filepath.Join(dir, "stage")
	var cmds strings.Builder
	cmds.WriteString("# kpreload switch there and back, and into a damaged set\n")
	for _, s := range steps {
		fmt.Fprintf(&cmds, "/usr/bin/kpreload switch %s --json\n", s.version)
	}
	writeFile(t, filepath.Join(stage, "etc", "commands"), cmds.String(), 0o644)
	for _, v := range []string{"1.0.0", "2.0.0"} {
		writeFile(t, filepath.Join(stage, "drivers", v, "VERSION"), v+"\n", 0o644)
	}
	ubin := filepath.Join(stage, "usr-bin")
	if err := os.MkdirAll(ubin, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", kpreload, filepath.Join(ubin, "kpreload")).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	disk := filepath.Join(dir, "root.img")
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 2*time.Minute))
	defer cancel()
	if err := rootdisk.Build(ctx, rootdisk.Options{Out: disk, UUID: rootUUID, Init: rootInit, Extra: map[string]string{
		"/var/lib/kpreload/cache": cache,
		"/usr/bin":                ubin,
		"/etc/kpreload-test":      filepath.Join(stage, "etc"),
		"/opt/kpreload/drivers":   filepath.Join(stage, "drivers"),
	}}); err != nil {
		t.Fatalf("root disk: %v", err)
	}
	initrd := filepath.Join(dir, "initrd.img")
	if _, err := assemble.WriteFile(assemble.Options{Kernel: kernel, ModulesDir: filepath.Join(ktree, "lib", "modules", kernel), Init: initBin}, initrd); err != nil {
		t.Fatalf("initramfs: %v", err)
	}

	bctx, bcancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 6*time.Minute))
	defer bcancel()
	res, err := qemu.Run(bctx, qemu.Config{
		Kernel:    filepath.Join(ktree, "boot", "vmlinuz-"+kernel),
		Initramfs: initrd,
		RootDisk:  disk,
		Devices:   []string{"edu"},
		// kpreload.driver asks /init for 1.0.0 where it selects a version; where it
		// does not yet, it loads a cached set that matches and the test follows.
		Append:     "root=UUID=" + rootUUID + " kpreload.driver=1.0.0 " + run.Param + "=/etc/kpreload-test/commands",
		Timeout:    testenv.Deadline(t, 5*time.Minute),
		ConsoleLog: filepath.Join(dir, "console.log"),
	})
	if err != nil {
		t.Fatalf("boot: %v", err)
	}
	if res.Report == nil || res.RootInit == nil {
		t.Fatalf("boot: report %v, root init record %v; console:\n%s", res.Report != nil, res.RootInit != nil, tail(res.Console, 40))
	}
	log, err := os.ReadFile(res.ReportLog)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := run.Scan(strings.NewReader(string(log)))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(steps) {
		t.Fatalf("the VM ran %d commands, want %d; console:\n%s", len(recs), len(steps), tail(res.Console, 40))
	}

	// Which version /init bound at boot.
	active := ""
	for _, m := range res.Report.Modules {
		if m.Name == "kpreload_edu" && m.Result == "loaded" {
			active = versions[m.Set]
		}
	}
	t.Logf("boot: kpreload_edu %q bound by /init", active)
	var wantBound []string // versions the kernel log must show binding, in order
	if active != "" {
		wantBound = append(wantBound, active)
	}
	sawThereAndBack := map[string]bool{}
	for i, s := range steps {
		rec := recs[i]
		var r switcher.Result
		out := rec.Output
		j := strings.Index(out, "\n{")
		if strings.HasPrefix(out, "{") {
			j = -1
		}
		// Progress lines come first, the JSON record next, an error line last.
		if err := json.NewDecoder(strings.NewReader(out[j+1:])).Decode(&r); err != nil {
			t.Fatalf("step %d (switch %s): output is not a JSON record (%v):\n%s", i+1, s.version, err, out)
		}
		t.Logf("step %d: switch %s: exit %d in %.2fs", i+1, s.version, rec.Exit, r.Seconds)
		from := ""
		if r.From != nil {
			from = r.From.Version
		}
		if r.To == nil || r.To.Version != s.version || from != active {
			t.Errorf("step %d: switch %s went %q -> %+v, want %q -> %s\n%s", i+1, s.version, from, r.To, active, s.version, out)
		}
		switch {
		case s.version == active:
			if rec.Exit != 0 || !r.Unchanged {
				t.Errorf("step %d: switch %s (already active): exit %d, unchanged %v; want 0, true\n%s", i+1, s.version, rec.Exit, r.Unchanged, out)
			}
		case s.ok:
			if rec.Exit != 0 || r.RolledBack || len(r.Bound) != 1 || r.Bound[0].Driver != "kpreload_edu" || r.Userspace != "/opt/kpreload/drivers/"+s.version {
				t.Errorf("step %d: switch %s: exit %d, rolled back %v, bound %+v, userspace %q; want 0, false, the edu device bound to kpreload_edu, /opt/kpreload/drivers/%s\n%s",
					i+1, s.version, rec.Exit, r.RolledBack, r.Bound, r.Userspace, s.version, out)
			}
			sawThereAndBack[active+"->"+s.version] = true
			active = s.version
			wantBound = append(wantBound, s.version)
		default:
			if rec.Exit == 0 || !r.RolledBack || !strings.Contains(out, "digest mismatch") || !strings.Contains(out, "rolled back to kpreload-edu "+active) {
				t.Errorf("step %d: switch %s (damaged): exit %d, rolled back %v; want a failure naming the digest mismatch and the rollback to %s\n%s", i+1, s.version, rec.Exit, r.RolledBack, active, out)
			}
			wantBound = append(wantBound, active)
		}
	}
	if !sawThereAndBack["1.0.0->2.0.0"] || !sawThereAndBack["2.0.0->1.0.0"] {
		t.Errorf("switches done: %v; want 1.0.0->2.0.0 and back", sawThereAndBack)
	}

	// The kernel's own word: each bind with the driver version it ran.
	var gotBound []string
	for _, k := range res.RootInit.Kmsg {
		if m := boundLine.FindStringSubmatch(k.Text); m != nil {
			gotBound = append(gotBound, m[2])
		}
	}
	if strings.Join(gotBound, " ") != strings.Join(wantBound, " ") {
		t.Errorf("kernel log binds versions %q, want %q", gotBound, wantBound)
	}
	edu := false
	for _, d := range res.RootInit.PCI {
		if d.ID() == "1234:11e8" {
			edu = d.Driver == "kpreload_edu" && d.EduID == "0x010000ed"
		}
	}
	if !edu {
		t.Errorf("at the end the edu device is not bound to kpreload_edu with its edu_id: %+v", res.RootInit.PCI)
	}
	if len(res.RootInit.Errors) > 0 {
		t.Errorf("root init errors: %q", res.RootInit.Errors)
	}
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
