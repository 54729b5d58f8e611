package rootfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/internal/runner"
)

// recorder stands in for the programs: it records each command line, makes
// the files mmdebstrap and dpkg-deb would, and fails the command that
// begins or ends with fail.
type recorder struct {
	t       *testing.T
	fail    string
	missing bool
	cmds    []string
}

func (r *recorder) LookPath(name string) (string, error) {
	if r.missing {
		return "", errors.New("not found")
	}
	return "/fake/" + name, nil
}

func (r *recorder) Run(ctx context.Context, c runner.Cmd) ([]byte, error) {
	line := c.String()
	r.cmds = append(r.cmds, line)
	if r.fail != "" && (strings.HasPrefix(line, r.fail) || strings.HasSuffix(line, r.fail)) {
		return nil, &runner.Error{Cmd: c, Err: errors.New("exit status 1"), Tail: []string{"fake failure"}}
	}
	switch c.Name {
	case "mmdebstrap":
		i := slices.IndexFunc(c.Args, func(s string) bool { return !strings.HasPrefix(s, "--") })
		if err := os.WriteFile(c.Args[i+1], []byte("tar"), 0o644); err != nil {
			r.t.Fatal(err)
		}
	case "dpkg-deb":
		if err := os.WriteFile(c.Args[len(c.Args)-1], []byte("deb"), 0o644); err != nil {
			r.t.Fatal(err)
		}
	case "dpkg-query":
		return []byte("1.2-3\n"), nil
	}
	return nil, nil
}

func (r *recorder) ran(prefix string) int {
	n := 0
	for _, c := range r.cmds {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

func tools(r *recorder) Tools {
	h := Host{Runner: r}
	return Tools{Runner: r, Mmdebstrap: h, Dpkg: h}
}

var spec = Spec{Suite: "bookworm", Sources: []string{"deb http://deb.debian.org/debian bookworm main"}, Packages: []string{"kmod"}, Date: "2025-01-01"}

// TestTarball makes a tarball with mmdebstrap (and the stand-in initramfs
// tool), keeps it in the cache, reuses it, and reports each tool's failure.
func TestTarball(t *testing.T) {
	ctx := context.Background()
	cache := t.TempDir()
	r := &recorder{t: t}
	var msgs []string
	got, info, err := Tarball(ctx, tools(r), spec, cache, t.TempDir(), func(m string) { msgs = append(msgs, m) })
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(cache, Key(spec)+".tar"); got != want || info.Cached {
		t.Errorf("Tarball = %s (cached %v), want %s made now", got, info.Cached, want)
	}
	if r.ran("mmdebstrap --variant=minbase --include=kmod,") != 1 || r.ran("dpkg-deb --root-owner-group --build") != 1 {
		t.Errorf("ran %q, want dpkg-deb then mmdebstrap", r.cmds)
	}
	if len(msgs) != 2 {
		t.Errorf("progress = %q, want mmdebstrap's start and end", msgs)
	}
	// An old leftover is pruned, the new tarball kept.
	old := filepath.Join(cache, "old.tar")
	os.WriteFile(old, nil, 0o644)
	os.Chtimes(old, time.Now().Add(-72*time.Hour), time.Now().Add(-72*time.Hour))
	r2 := &recorder{t: t}
	got2, info2, err := Tarball(ctx, tools(r2), spec, cache, t.TempDir(), nil)
	if err != nil || got2 != got || !info2.Cached || len(r2.cmds) != 0 {
		t.Errorf("second Tarball = %s, %+v, %v, ran %q; want the cached tarball, nothing run", got2, info2, err, r2.cmds)
	}
	pruneCache(cache, got)
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old tarball kept: %v", err)
	}
	// No cache, a plain root (no stand-in tool).
	plain := spec
	plain.DistributionInitramfs = true
	r3 := &recorder{t: t}
	work := t.TempDir()
	got3, _, err := Tarball(ctx, tools(r3), plain, "off", work, nil)
	if err != nil || got3 != filepath.Join(work, "rootfs.tar") || r3.ran("dpkg-deb") != 0 {
		t.Errorf("uncached plain Tarball = %s, %v, ran %q", got3, err, r3.cmds)
	}
	for _, tt := range []struct {
		r       *recorder
		wantErr string
	}{
		{&recorder{t: t, fail: "mmdebstrap"}, "rootfs: mmdebstrap --variant=minbase"},
		{&recorder{t: t, fail: "dpkg-deb"}, "build kpreload-initramfs-tool: dpkg-deb"},
		{&recorder{t: t, missing: true}, "mmdebstrap is missing"},
	} {
		if _, _, err := Tarball(ctx, tools(tt.r), spec, t.TempDir(), t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("Tarball error = %v, want %q", err, tt.wantErr)
		}
	}
}

// TestConfigure configures a root as an image: its files, the units it
// enables, identity reset and cloud-init, and the tools' failures.
func TestConfigure(t *testing.T) {
	ctx := context.Background()
	for _, kp := range []bool{false, true} {
		t.Run(fmt.Sprint("kpreload=", kp), func(t *testing.T) {
			root := t.TempDir()
			for p, c := range map[string]string{
				"etc/shadow": "root:*:1::::::\n", "usr/sbin/sshd": "", "etc/ssh/ssh_host_rsa_key": "k",
				"var/lib/systemd/random-seed": "s", "usr/bin/cloud-init": "",
			} {
				os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755)
				os.WriteFile(filepath.Join(root, p), []byte(c), 0o644)
			}
			r := &recorder{t: t}
			h := Host{Runner: r}
			if err := Configure(ctx, h, root, "root-uuid", "ABCD-1234", true, kp); err != nil {
				t.Fatal(err)
			}
			if err := ResetIdentity(ctx, h, root); err != nil {
				t.Fatal(err)
			}
			if err := ConfigureCloudInit(root); err != nil {
				t.Fatal(err)
			}
			fstab, _ := os.ReadFile(filepath.Join(root, "etc/fstab"))
			if !strings.Contains(string(fstab), "UUID=root-uuid / ext4") || !strings.Contains(string(fstab), "UUID=ABCD-1234 /boot/efi vfat") {
				t.Errorf("fstab = %q", fstab)
			}
			shadow, _ := os.ReadFile(filepath.Join(root, "etc/shadow"))
			if string(shadow) != "root::1::::::\n" {
				t.Errorf("shadow = %q, want root's password empty", shadow)
			}
			for _, p := range []string{"etc/ssh/ssh_host_rsa_key", "var/lib/systemd/random-seed"} {
				if _, err := os.Stat(filepath.Join(root, p)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s kept: %v", p, err)
				}
			}
			if r.ran("systemctl --root="+root+" enable systemd-networkd.service") != 1 || r.ran("systemctl --root="+root+" enable "+SSHHostKeysUnitName) != 1 {
				t.Errorf("ran %q", r.cmds)
			}
			if got, want := r.ran("systemctl --root="+root+" preset kpreload-"), map[bool]int{false: 0, true: 1}[kp]; got != want {
				t.Errorf("preset ran %d times, want %d", got, want)
			}
		})
	}
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "usr/sbin"), 0o755)
	os.WriteFile(filepath.Join(root, "usr/sbin/sshd"), nil, 0o755)
	for _, tt := range []struct{ fail, wantErr string }{
		{"enable systemd-networkd.service", "enable systemd-networkd"},
		{"systemctl --root=" + root + " preset", "preset kpreload units"},
	} {
		r := &recorder{t: t, fail: tt.fail}
		err := Configure(ctx, Host{Runner: r}, root, "u", "E", false, true)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("Configure error = %v, want %q", err, tt.wantErr)
		}
	}
	if err := ResetIdentity(ctx, Host{Runner: &recorder{t: t, fail: "enable " + SSHHostKeysUnitName}}, root); err == nil {
		t.Error("ResetIdentity with a failing systemctl: nil error")
	}
	if err := ConfigureCloudInit(t.TempDir()); err == nil {
		t.Error("ConfigureCloudInit without cloud-init: nil error")
	}
}

// TestConfigureCloudInitLocale: a root without a system locale gets C.UTF-8
// (cloud-init's own default is not generated in images); one with a locale
// keeps it.
func TestConfigureCloudInitLocale(t *testing.T) {
	for _, tt := range []struct{ name, have, want string }{
		{"none", "", systemLocale},
		{"kept", "LANG=de_DE.UTF-8\n", "LANG=de_DE.UTF-8\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755)
			os.WriteFile(filepath.Join(root, "usr/bin/cloud-init"), nil, 0o755)
			if tt.have != "" {
				os.MkdirAll(filepath.Join(root, "etc/default"), 0o755)
				os.WriteFile(filepath.Join(root, "etc/default/locale"), []byte(tt.have), 0o644)
			}
			if err := ConfigureCloudInit(root); err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(filepath.Join(root, "etc/default/locale"))
			if string(got) != tt.want {
				t.Errorf("/etc/default/locale = %q, want %q", got, tt.want)
			}
			cfg, _ := os.ReadFile(filepath.Join(root, cloudInitConfigPath))
			if !strings.Contains(string(cfg), "\nlocale: C.UTF-8\n") {
				t.Errorf("%s lacks locale: C.UTF-8:\n%s", cloudInitConfigPath, cfg)
			}
		})
	}
}

// TestKernelPackagesAndFiles reads kernel package versions through dpkg-query
// and copies extra files in.
func TestKernelPackagesAndFiles(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	got, err := KernelPackages(ctx, Host{Runner: &recorder{t: t}}, root, []string{"6.1.0-1-amd64"})
	if err != nil || got["6.1.0-1-amd64"] != "1.2-3" {
		t.Errorf("KernelPackages = %v, %v", got, err)
	}
	if _, err := KernelPackages(ctx, Host{Runner: &recorder{t: t, fail: "dpkg-query"}}, root, []string{"k"}); err == nil || !strings.Contains(err.Error(), "kernel k is not installed") {
		t.Errorf("KernelPackages error = %v", err)
	}
	src := filepath.Join(t.TempDir(), "f")
	os.WriteFile(src, []byte("x"), 0o600)
	if err := AddFiles(root, map[string]string{"/etc/a/f": src}); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(root, "etc/a/f")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("copied file: %v, %v; want mode 0600", st, err)
	}
	if err := AddFiles(root, map[string]string{"/etc/b": filepath.Join(t.TempDir(), "missing")}); err == nil || !strings.Contains(err.Error(), "file /etc/b") {
		t.Errorf("AddFiles of a missing file: %v", err)
	}
	dir := t.TempDir()
	if err := Unpack(ctx, Host{Runner: &recorder{t: t, fail: "tar"}}, "x.tar", filepath.Join(dir, "r")); err == nil {
		t.Error("Unpack with a failing tar: nil error")
	}
}
func TestSetEmptyRootPassword(t *testing.T) {
	p := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(p, []byte("root:*:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := SetEmptyRootPassword(p); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	if got, want := string(b), "root::19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n"; got != want {
		t.Errorf("shadow = %q, want %q", got, want)
	}
	if err := os.WriteFile(p, []byte("daemon:*:1::::::\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := SetEmptyRootPassword(p); err == nil {
		t.Error("shadow without root: nil error")
	}
}
