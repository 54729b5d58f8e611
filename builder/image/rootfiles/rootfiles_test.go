package rootfiles

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

// units are the systemd units every image carries.
var units = []string{
	"kpreload-drivers.path", "kpreload-drivers.target", "kpreload-ldconfig.service",
	"kpreload-persistenced.service", "kpreload-ready.service", "kpreload-cdi.service", "kpreload-boot-ok.service",
	"kpreload-up.service",
}

// extract copies FS's files into a directory.
func extract(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	sub, err := fs.Sub(FS, "files")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(dir, sub); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestUnitsVerify runs systemd-analyze verify on the units. The persistence
// daemon lives behind /run/kpreload/driver, which only exists on a booted image:
// the copy verified here points at a stand-in executable instead.
func TestUnitsVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze not found: install systemd (apt-get install systemd) to verify the units")
	}
	dir := extract(t)
	unitDir := filepath.Join(dir, "usr/lib/systemd/system")
	driver := filepath.Join(t.TempDir(), "driver")
	if err := os.MkdirAll(filepath.Join(driver, "usr/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(driver, "usr/bin/nvidia-persistenced"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	kpreload := filepath.Join(t.TempDir(), "kpreload")
	if err := os.WriteFile(kpreload, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, u := range units {
		p := filepath.Join(unitDir, u)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("unit %s is missing: %v", u, err)
		}
		if err := os.WriteFile(p, []byte(strings.NewReplacer("/run/kpreload/driver/", driver+"/", "/usr/bin/kpreload ", kpreload+" ").Replace(string(b))), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	out, err := exec.Command(analyze, append([]string{"verify", "--man=no"}, paths...)...).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestUnitContracts checks what other parts of kpreload rely on in the units.
func TestUnitContracts(t *testing.T) {
	read := func(name string) string {
		b, err := fs.ReadFile(FS, "files/usr/lib/systemd/system/"+name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	tests := []struct{ unit, want string }{
		{"kpreload-persistenced.service", "ExecStart=/run/kpreload/driver/usr/bin/nvidia-persistenced --persistence-mode\n"},
		{"kpreload-persistenced.service", "ConditionPathExists=/proc/driver/nvidia/version\n"},
		{"kpreload-persistenced.service", "Before=kpreload-drivers.target\n"},
		{"kpreload-ready.service", "test -s /run/kpreload/ready"},
		{"kpreload-drivers.target", "Requires=kpreload-ready.service\n"},
		{"kpreload-drivers.path", "PathExists=/run/kpreload/ready\n"},
		{"kpreload-ldconfig.service", "ConditionPathExists=/run/kpreload/driver\n"},
		{"kpreload-ldconfig.service", "Before=sysinit.target shutdown.target systemd-update-done.service kpreload-drivers.target\n"},
		// kpreload boot --image ends on its record: only once the default target is reached.
		{"kpreload-up.service", "After=multi-user.target graphical.target\n"},
		{"kpreload-up.service", "ExecStart=/usr/bin/kpreload kernel-hook up\n"},
		{"kpreload-boot-ok.service", "ExecStart=/usr/bin/kpreload kernel-hook boot-ok\n"},
	}
	for _, tt := range tests {
		if got := read(tt.unit); !strings.Contains(got, tt.want) {
			t.Errorf("%s lacks %q", tt.unit, tt.want)
		}
	}
}

// debs returns the real Debian packages of two driver branches' libraries, from
// $KPRELOAD_CACHE/debs, downloading them there with apt-get when absent (the
// non-free component must be enabled: scripts/deps.sh does it).
func debs(t *testing.T, pkgs ...string) map[string]string {
	t.Helper()
	testenv.SkipShort(t, "needs the .debs of "+strings.Join(pkgs, ", ")+" (downloaded from Debian's archive)")
	cache := testenv.CacheRoot()
	dir := filepath.Join(cache, "debs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	found := map[string]string{}
	var missing []string
	for _, p := range pkgs {
		m, _ := filepath.Glob(filepath.Join(dir, p+"_*_amd64.deb"))
		if len(m) == 0 {
			missing = append(missing, p)
			continue
		}
		found[p] = m[len(m)-1]
	}
	if len(missing) > 0 {
		cmd := exec.Command("apt-get", append([]string{"download"}, missing...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("apt-get download %s (in %s): %v\n%s\nrun scripts/deps.sh to enable Debian's non-free component", strings.Join(missing, " "), dir, err, out)
		}
		return debs(t, pkgs...)
	}
	return found
}

// TestLdconfigFindsDriverLibraries unpacks the real libcuda1 and libnvidia-ml1
// (branch 535, nvidia/current) and libnvidia-tesla-470-cuda1 (nvidia/tesla-470) the
// way images do, installs the image's ld.so.conf.d entry and runs the real
// ldconfig in that root: without the link (as at image build) the cache knows no
// driver library, with it the libraries come through /run/kpreload/driver, and
// after repointing and another ldconfig (kpreload-ldconfig.service, kpreload
// switch) they come from the other branch's directory.
func TestLdconfigFindsDriverLibraries(t *testing.T) {
	ldconfig, err := exec.LookPath("ldconfig")
	if err != nil {
		ldconfig = "/sbin/ldconfig"
	}
	pk := debs(t, "libcuda1", "libnvidia-ml1", "libnvidia-tesla-470-cuda1")
	root := extract(t)
	for ver, ps := range map[string][]string{"535": {"libcuda1", "libnvidia-ml1"}, "470": {"libnvidia-tesla-470-cuda1"}} {
		if err := os.MkdirAll(filepath.Join(root, "opt/kpreload/drivers", ver), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if out, err := exec.Command("dpkg", "-x", pk[p], filepath.Join(root, "opt/kpreload/drivers", ver)).CombinedOutput(); err != nil {
				t.Fatalf("dpkg -x %s: %v\n%s", pk[p], err, out)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), []byte("include /etc/ld.so.conf.d/*.conf\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "run/kpreload"), 0o755); err != nil {
		t.Fatal(err)
	}
	entry := regexp.MustCompile(`(?m)^\s*(\S+) \(libc6,x86-64\) => (\S+)$`)
	cacheOf := func() map[string]string {
		if out, err := exec.Command(ldconfig, "-r", root).CombinedOutput(); err != nil || len(out) > 0 {
			t.Fatalf("ldconfig -r %s: %v\n%s", root, err, out)
		}
		out, err := exec.Command(ldconfig, "-r", root, "-p").CombinedOutput()
		if err != nil {
			t.Fatalf("ldconfig -p: %v\n%s", err, out)
		}
		libs := map[string]string{}
		for _, m := range entry.FindAllStringSubmatch(string(out), -1) {
			libs[m[1]] = m[2]
		}
		return libs
	}
	if libs := cacheOf(); libs["libcuda.so.1"] != "" || libs["libnvidia-ml.so.1"] != "" {
		t.Errorf("without the link: cache has libcuda.so.1 %q, libnvidia-ml.so.1 %q; want neither", libs["libcuda.so.1"], libs["libnvidia-ml.so.1"])
	}
	link := filepath.Join(root, "run/kpreload/driver")
	const lib = "/run/kpreload/driver/usr/lib/x86_64-linux-gnu/nvidia/"
	for _, tt := range []struct {
		version string
		want    map[string]string
	}{
		{"535", map[string]string{"libcuda.so.1": lib + "current/libcuda.so.1", "libnvidia-ml.so.1": lib + "current/libnvidia-ml.so.1"}},
		{"470", map[string]string{"libcuda.so.1": lib + "tesla-470/libcuda.so.1", "libnvidia-ml.so.1": ""}},
	} {
		os.Remove(link)
		if err := os.Symlink("/opt/kpreload/drivers/"+tt.version, link); err != nil {
			t.Fatal(err)
		}
		libs := cacheOf()
		for name, want := range tt.want {
			if libs[name] != want {
				t.Errorf("link to %s: cache maps %s to %q, want %q", tt.version, name, libs[name], want)
			}
		}
	}
}

// TestPreset applies the preset file with the real systemctl to a root holding
// only these files: the units an image needs come out enabled.
func TestPreset(t *testing.T) {
	systemctl, err := exec.LookPath("systemctl")
	if err != nil {
		t.Fatal("systemctl not found: install systemd (apt-get install systemd)")
	}
	root := extract(t)
	out, err := exec.Command(systemctl, append([]string{"--root=" + root, "preset"}, units...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("systemctl preset: %v\n%s", err, out)
	}
	for _, want := range []string{
		"multi-user.target.wants/kpreload-drivers.target",
		"paths.target.wants/kpreload-drivers.path",
		"sysinit.target.wants/kpreload-ldconfig.service",
		"kpreload-drivers.target.wants/kpreload-persistenced.service",
		"sysinit.target.wants/kpreload-boot-ok.service",
		// Where kpreload-boot-ok.service looks before it announces the up record.
		"multi-user.target.wants/kpreload-up.service",
	} {
		if _, err := os.Lstat(filepath.Join(root, "etc/systemd/system", want)); err != nil {
			t.Errorf("after preset: %v", err)
		}
	}
}
