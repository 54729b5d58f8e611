package image

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kpreload/kpreload/builder/image/bootloader"
	"github.com/kpreload/kpreload/builder/image/disk"
	"github.com/kpreload/kpreload/builder/internal/runner"
	"github.com/kpreload/kpreload/builder/internal/sandbox/sandboxtest"
)

// fakeRunner stands in for the builder's programs in unit tests: it records
// each command line and makes the files the real program would (a root
// filesystem tree for tar -x, core.img for grub-mkimage, grub.cfg for
// grub-mkconfig, the converted disk for qemu-img ...), with no root, no
// network and no archive.
type fakeRunner struct {
	t *testing.T
	// kernels are the kernel releases the fake root filesystem holds.
	kernels []string
	// fail, when set, makes the first command fail whose line begins or ends
	// with it, or that runs it in a root's sandbox.
	fail string
	// missing are programs LookPath does not find.
	missing []string

	mu    sync.Mutex
	cmds  []string
	stdin map[string]string
	// probe is what the root's grub-probe was while grub-mkconfig ran.
	probe string
}

func (f *fakeRunner) LookPath(name string) (string, error) {
	if slices.Contains(f.missing, name) {
		return "", fmt.Errorf("exec: %q: executable file not found in $PATH", name)
	}
	return "/fake/bin/" + name, nil
}

// ran returns the recorded command lines that start with prefix.
func (f *fakeRunner) ran(prefix string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.cmds {
		if strings.HasPrefix(c, prefix) {
			out = append(out, c)
		}
	}
	return out
}

func (f *fakeRunner) Run(ctx context.Context, c runner.Cmd) ([]byte, error) {
	line := sandboxtest.Line(c)
	f.mu.Lock()
	f.cmds = append(f.cmds, line)
	if c.Stdin != nil {
		b, _ := io.ReadAll(c.Stdin)
		if f.stdin == nil {
			f.stdin = map[string]string{}
		}
		f.stdin[c.Name] = string(b)
	}
	f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", c.Name, err)
	}
	root, argv, inRoot := sandboxtest.Parse(c)
	if f.fail != "" && (strings.HasPrefix(line, f.fail) || strings.HasSuffix(line, f.fail) || inRoot && argv[0] == f.fail) {
		f.fail = ""
		return nil, &runner.Error{Cmd: c, Err: fmt.Errorf("exit status 1"), Tail: []string{c.Name + ": fake failure"}}
	}
	a := c.Args
	if inRoot {
		a = argv[1:]
	}
	last := func() string { return a[len(a)-1] }
	after := func(flag string) string {
		i := slices.Index(a, flag)
		if i < 0 || i+1 >= len(a) {
			f.t.Fatalf("%s: no %s", line, flag)
		}
		return a[i+1]
	}
	name := c.Name
	if inRoot {
		name = "in root " + argv[0]
	}
	switch name {
	case "mmdebstrap":
		// The tarball follows the suite; the apt sources come last.
		i := slices.IndexFunc(a, func(s string) bool { return !strings.HasPrefix(s, "--") })
		f.write(a[i+1], "fake rootfs tarball")
	case "tar":
		if a[0] == "-x" {
			f.root(after("-C"))
		} else {
			out := after("-Sczf")
			if !filepath.IsAbs(out) {
				out = filepath.Join(c.Dir, out)
			}
			f.write(out, "fake tar.gz")
		}
	case "dpkg-deb":
		f.write(last(), "fake deb")
	case "dpkg-query":
		return []byte("6.1.158-1\n"), nil
	case "dpkg":
		f.write(filepath.Join(last(), "usr/share/doc/fake/copyright"), "fake")
	case "cp":
		if a[0] == "-rL" {
			break // the userspace source: the fake make needs none of it
		}
		// A sparse copy of the same size (the content is not read).
		st, err := os.Stat(a[len(a)-2])
		if err != nil {
			return nil, err
		}
		f.write(last(), "")
		if err := os.Truncate(last(), st.Size()); err != nil {
			return nil, err
		}
	case "qemu-img", "virt-fw-vars":
		f.write(last(), "fake "+c.Name)
	case "in root grub-mkimage":
		f.write(filepath.Join(root, after("-o")), strings.Repeat("\x00", 2*disk.SectorSize+100))
	case "in root grub-mkconfig":
		b, _ := os.ReadFile(filepath.Join(root, "usr/sbin/grub-probe"))
		f.probe = string(b)
		f.write(filepath.Join(root, after("-o")), "menuentry 'fake' {}\n")
	case "make":
		f.write(filepath.Join(strings.TrimPrefix(a[3], "DESTDIR="), "usr/bin/fake-smi"), "fake")
	}
	return nil, nil
}

// write makes a file and its directories.
func (f *fakeRunner) write(p, content string) {
	f.t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// root makes the tree mmdebstrap's tarball would unpack to: the kernels,
// GRUB's and shim's files, an SSH server with a host key, cloud-init and
// root's shadow entry.
func (f *fakeRunner) root(dir string) {
	files := map[string]string{
		"etc/shadow":                                       "root:*:19000:0:99999:7:::\n",
		"etc/ssh/ssh_host_ed25519_key":                     "key",
		"usr/sbin/sshd":                                    "",
		"usr/bin/cloud-init":                               "",
		"var/lib/dbus/machine-id":                          "0123",
		"usr/lib/grub/i386-pc/boot.img":                    strings.Repeat("\x00", disk.SectorSize),
		"usr/lib/grub/i386-pc/normal.mod":                  "",
		"usr/lib/grub/i386-pc/moddep.lst":                  "",
		"usr/lib/grub/x86_64-efi/normal.mod":               "",
		"usr/sbin/grub-probe":                              "real grub-probe",
		"usr/bin/grub-mkrelpath":                           "real grub-mkrelpath",
		bootloader.ShimImage:                               "shim",
		bootloader.MokManager:                              "mm",
		bootloader.SignedGrub:                              "grub",
		"usr/share/doc/base-files/copyright":               "",
		"dev/.keep":                                        "",
		"var/lib/dpkg/status":                              "",
		"lib/firmware/.keep":                               "",
		"etc/kernel/postinst.d/.keep":                      "",
		"usr/lib/systemd/system/ssh.service":               "",
		"usr/lib/systemd/system-preset/.keep":              "",
		"etc/systemd/system/multi-user.target.wants/.keep": "",
	}
	for _, k := range f.kernels {
		files["boot/vmlinuz-"+k] = "kernel"
		files["lib/modules/"+k+"/modules.dep"] = ""
		files["lib/modules/"+k+"/modules.order"] = ""
		// ext4 and crc32c built in, as in the cloud kernels: the
		// initramfs mounts the root with no module.
		files["lib/modules/"+k+"/modules.builtin"] = "kernel/fs/ext4/ext4.ko\nkernel/crypto/crc32c_generic.ko\n"
		files["lib/modules/"+k+"/modules.builtin.modinfo"] = "ext4.alias=fs-ext4\x00crc32c_generic.alias=crypto-crc32c\x00crc32c_generic.alias=crc32c\x00"
	}
	for p, c := range files {
		f.write(filepath.Join(dir, p), c)
	}
}
