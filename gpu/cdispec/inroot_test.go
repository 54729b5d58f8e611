package cdispec

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/gpu/activate"
	"github.com/kpreload/kpreload/internal/inroot"
)

// hostile holds the helpers of the hostile-root rows: the root under test and
// a directory beside it that the root's links point at and that nothing may
// read.
type hostile struct {
	t             *testing.T
	root, outside string
}

func (h hostile) link(target, at string) {
	h.t.Helper()
	p := filepath.Join(h.root, at)
	os.RemoveAll(p)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Symlink(strings.ReplaceAll(target, "OUTSIDE", h.outside), p); err != nil {
		h.t.Fatal(err)
	}
}

// fifo replaces at with a named pipe no one writes to.
func (h hostile) fifo(at string) {
	h.t.Helper()
	p := filepath.Join(h.root, at)
	os.RemoveAll(p)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := unix.Mkfifo(p, 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// huge replaces at with a sparse file of 1.5 GB.
func (h hostile) huge(at string) {
	h.t.Helper()
	p := filepath.Join(h.root, at)
	os.RemoveAll(p)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Truncate(p, 1500<<20); err != nil {
		h.t.Fatal(err)
	}
}

// zero makes <root>/dev/zero the real character device (1,5) and links at to
// it, as a tree copied with its device nodes has it; it skips the test where
// device nodes cannot be made.
func (h hostile) zero(at string) {
	h.t.Helper()
	dev := filepath.Join(h.root, "dev/zero")
	if err := os.MkdirAll(filepath.Dir(dev), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := unix.Mknod(dev, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 5))); err != nil {
		h.t.Skipf("mknod %s: %v (needs CAP_MKNOD)", dev, err)
	}
	h.link("/dev/zero", at)
}

// kpreload turns the tree into a kpreload image with version active.
func (h hostile) kpreload() {
	h.t.Helper()
	run := filepath.Join(h.root, activate.RunDir)
	if err := os.MkdirAll(filepath.Join(h.root, activate.DriversDir, h200Version), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := activate.Point(run, h.root, activate.DriversDir, h200Version); err != nil {
		h.t.Fatal(err)
	}
	if err := activate.MarkReady(run, activate.Ready{Driver: "nvidia", Version: h200Version, By: "init"}); err != nil {
		h.t.Fatal(err)
	}
}

// TestGenerateHostileRoot holds Generate to its rules on trees built to break
// them: every read stays in the root, is a regular file and is bounded; an
// input that breaks a rule is an error naming the file, or, where the design
// skips a missing input, is skipped; nothing hangs and nothing of the
// outside directory reaches the spec.
func TestGenerateHostileRoot(t *testing.T) {
	const hostOnly = "999.99.99"
	tests := []struct {
		name  string
		setup func(h hostile)
		// wantErr is what the error wraps (nil: Generate succeeds); wantFile
		// the file it names, relative to the root.
		wantErr  error
		wantFile string
	}{
		{"proc is a link to the host's proc", func(h hostile) { h.link("/proc", "proc") },
			syscall.ELOOP, "proc/devices"},
		{"proc is a relative link up to the host's proc", func(h hostile) { h.link("../../../../../../../../../proc", "proc") },
			syscall.ELOOP, "proc/devices"},
		{"proc is a link to another directory outside", func(h hostile) { h.link("OUTSIDE/proc", "proc") },
			fs.ErrNotExist, "proc/devices"},
		{"version linked outside the root", func(h hostile) { h.link("OUTSIDE/proc/driver/nvidia/version", "proc/driver/nvidia/version") },
			fs.ErrNotExist, "proc/driver/nvidia/version"},
		{"version linked up and out of the root", func(h hostile) {
			h.link("../../../../../../../../../.."+h.outside+"/proc/driver/nvidia/version", "proc/driver/nvidia/version")
		}, fs.ErrNotExist, "proc/driver/nvidia/version"},
		{"version is a FIFO", func(h hostile) { h.fifo("proc/driver/nvidia/version") },
			inroot.ErrNotRegular, "proc/driver/nvidia/version"},
		{"version links to the host's dev zero (none in the root)", func(h hostile) { h.link("/dev/zero", "proc/driver/nvidia/version") },
			fs.ErrNotExist, "proc/driver/nvidia/version"},
		{"version links to the root's dev zero", func(h hostile) { h.zero("proc/driver/nvidia/version") },
			inroot.ErrNotRegular, "proc/driver/nvidia/version"},
		{"version of 1.5 GB", func(h hostile) { h.huge("proc/driver/nvidia/version") },
			inroot.ErrTooLarge, "proc/driver/nvidia/version"},
		{"information is a FIFO", func(h hostile) { h.fifo("proc/driver/nvidia/gpus/0000:00:06.0/information") },
			inroot.ErrNotRegular, "proc/driver/nvidia/gpus/0000:00:06.0/information"},
		{"information links to the root's dev zero", func(h hostile) { h.zero("proc/driver/nvidia/gpus/0000:00:06.0/information") },
			inroot.ErrNotRegular, "proc/driver/nvidia/gpus/0000:00:06.0/information"},
		{"information of 1.5 GB", func(h hostile) { h.huge("proc/driver/nvidia/gpus/0000:00:06.0/information") },
			inroot.ErrTooLarge, "proc/driver/nvidia/gpus/0000:00:06.0/information"},
		{"proc devices is a FIFO", func(h hostile) { h.fifo("proc/devices") },
			inroot.ErrNotRegular, "proc/devices"},
		{"ld.so.cache is a FIFO", func(h hostile) { h.fifo("etc/ld.so.cache") },
			inroot.ErrNotRegular, "etc/ld.so.cache"},
		{"ld.so.cache links to the root's dev zero", func(h hostile) { h.zero("etc/ld.so.cache") },
			inroot.ErrNotRegular, "etc/ld.so.cache"},
		{"ld.so.cache of 1.5 GB", func(h hostile) { h.huge("etc/ld.so.cache") },
			inroot.ErrTooLarge, "etc/ld.so.cache"},
		// A missing linker cache is skipped by design: a link to /dev/zero
		// resolves to the root's own, missing, /dev/zero.
		{"ld.so.cache links to the host's dev zero (none in the root)", func(h hostile) { h.link("/dev/zero", "etc/ld.so.cache") }, nil, ""},
		// The firmware path is optional: one that cannot be read is skipped.
		{"firmware_class path is a FIFO", func(h hostile) { h.fifo("sys/module/firmware_class/parameters/path") }, nil, ""},
		{"host library directory linked outside", func(h hostile) { h.link("OUTSIDE/usr/local/nvidia/lib64", "usr/local/nvidia/lib64") }, nil, ""},
		{"host binary linked outside", func(h hostile) { h.link("OUTSIDE/usr/local/nvidia/bin/nvidia-smi", "usr/local/nvidia/bin/nvidia-smi") }, nil, ""},
		{"kpreload userspace linked outside", func(h hostile) {
			h.kpreload()
			h.link("OUTSIDE/opt/kpreload/drivers/"+h200Version, "opt/kpreload/drivers/"+h200Version)
		}, nil, ""},
		{"kpreload userspace linked up and out", func(h hostile) {
			h.kpreload()
			h.link("../../../../../../../../.."+h.outside+"/opt/kpreload/drivers/"+h200Version, "opt/kpreload/drivers/"+h200Version)
		}, nil, ""},
		{"kpreload driver link pointing outside", func(h hostile) {
			h.kpreload()
			h.link(h.outside+"/opt/kpreload/drivers/"+h200Version, "run/kpreload/driver")
		}, nil, ""},
		{"ready record is a FIFO", func(h hostile) { h.kpreload(); h.fifo("run/kpreload/ready") },
			inroot.ErrNotRegular, "run/kpreload/ready"},
		{"ready record of 1.5 GB", func(h hostile) { h.kpreload(); h.huge("run/kpreload/ready") },
			inroot.ErrTooLarge, "run/kpreload/ready"},
		// No record in the root: a host, whatever the outside holds.
		{"ready record linked outside", func(h hostile) {
			h.kpreload()
			h.link("OUTSIDE/run/kpreload/ready", "run/kpreload/ready")
		}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := h200Tree(t, map[string]string{
				"usr/local/nvidia/lib64/libcuda.so." + h200Version: "elf",
				"usr/local/nvidia/bin/nvidia-smi":                  "elf",
			})
			outside := t.TempDir()
			// What the outside holds: a driver of another version, libraries
			// and programs a host-only install would have.
			for p, c := range map[string]string{
				"proc/devices":               "Character devices:\n195 nvidia\n",
				"proc/driver/nvidia/version": "NVRM version: NVIDIA UNIX x86_64 Kernel Module  " + hostOnly + "  (host)\n",
				"usr/local/nvidia/lib64/libcuda.so." + h200Version:                                                "host only",
				"usr/local/nvidia/lib64/libhostonly.so." + h200Version:                                            "host only",
				"usr/local/nvidia/bin/nvidia-smi":                                                                 "host only",
				"opt/kpreload/drivers/" + h200Version + "/usr/lib/x86_64-linux-gnu/libhostonly.so." + h200Version: "host only",
				"opt/kpreload/drivers/" + h200Version + "/usr/bin/nvidia-smi":                                     "host only",
				"run/kpreload/ready": `{"format":1,"driver":"nvidia","version":"` + hostOnly + `","modules":[],"by":"init"}`,
			} {
				write(t, filepath.Join(outside, p), c)
			}
			tt.setup(hostile{t: t, root: root, outside: outside})

			var found *Found
			var err error
			var out []byte
			done := make(chan struct{})
			go func() {
				defer close(done)
				spec, f, e := Generate(root, Options{})
				found, err = f, e
				if spec != nil {
					out, _ = Marshal(spec, false)
				}
			}()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("Generate hung")
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Generate: err = %v, want one wrapping %v", err, tt.wantErr)
				}
				if want := filepath.Join(root, tt.wantFile); !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %s", err, want)
				}
				if strings.Contains(err.Error(), hostOnly) {
					t.Errorf("error %q shows what the outside holds", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			if found.Version != h200Version {
				t.Errorf("version %q, want the root's %s", found.Version, h200Version)
			}
			for _, bad := range []string{hostOnly, "libhostonly", outside} {
				if strings.Contains(string(out), bad) {
					t.Errorf("the spec holds %q from outside the root:\n%s", bad, out)
				}
			}
			for _, p := range append(append([]string{}, found.Libraries...), found.Binaries...) {
				b, err := inroot.ReadFile(root, p, 1<<10)
				if err != nil || string(b) == "host only" {
					t.Errorf("mounted %s is not the root's own file (%q, %v)", p, b, err)
				}
			}
		})
	}
}

// TestGenerateEduHostileRoot: the test driver's reads follow the same rules.
func TestGenerateEduHostileRoot(t *testing.T) {
	tests := []struct {
		name     string
		setup    func(h hostile)
		wantErr  error
		wantFile string
	}{
		{"misc dev is a FIFO", func(h hostile) { h.fifo("sys/class/misc/kpreload-edu0/dev") }, inroot.ErrNotRegular, "sys/class/misc/kpreload-edu0/dev"},
		{"misc dev of 1.5 GB", func(h hostile) { h.huge("sys/class/misc/kpreload-edu0/dev") }, inroot.ErrTooLarge, "sys/class/misc/kpreload-edu0/dev"},
		{"misc class linked outside", func(h hostile) { h.link("OUTSIDE", "sys/class/misc") }, nil, "sys/class/misc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := eduTree(t, "2.0.0")
			outside := t.TempDir()
			write(t, filepath.Join(outside, "kpreload-edu7/dev"), "10:99\n")
			tt.setup(hostile{t: t, root: root, outside: outside})
			_, _, err := GenerateEdu(root, Options{})
			if tt.wantErr == nil {
				// Nothing of the outside: no device at all.
				if err == nil || !strings.Contains(err.Error(), "no /dev/kpreload-edu<N> is registered") {
					t.Fatalf("GenerateEdu: err = %v, want no devices (the outside's are not the root's)", err)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), filepath.Join(root, tt.wantFile)) {
				t.Fatalf("GenerateEdu: err = %v, want one wrapping %v naming %s", err, tt.wantErr, tt.wantFile)
			}
		})
	}
}
