package loader

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/live/coldplug"
	"github.com/kpreload/kpreload/report"
	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

// Test kernels, as scripts/lib.sh sets them: 6.1 ships plain .ko, 6.12 .ko.xz.
const (
	kver61  = "6.1.0-56-cloud-amd64"
	kver612 = "6.12.117+deb12-cloud-amd64"
	// vermagic61 is the full vermagic of the 6.1 cloud kernel's own modules.
	vermagic61 = kver61 + " SMP preempt mod_unload modversions "
)

// call is one system call the fake kernel received.
type call struct {
	fn     string // "finit" or "init"
	name   string // module name of the file behind the fd; "" for init
	file   string // path behind the fd; "" for init
	params string
	flags  int
	head   []byte // first bytes of the file (read at offset 0) or of the image
	off    int64  // file offset of the fd at the time of the call
	image  []byte // the image passed to init_module
	start  int64  // sequence number when the call began
	end    int64  // sequence number when it returned
}

// fakeKernel records every call in order and answers with configured errors.
type fakeKernel struct {
	seq *atomic.Int64 // shared with the loader's Now, so report times and calls share one clock

	mu    sync.Mutex
	names map[string]string // module file path -> module name
	// finitErr is returned by FinitModule for a module name.
	finitErr map[string]error
	// finitFlagErr is returned by FinitModule when flags != 0 (compressed files).
	finitFlagErr error
	initErr      error
	calls        []*call

	// Modules in rendezvous wait inside FinitModule until another rendezvous
	// call is in flight too, or until wait has passed.
	rendezvous  map[string]bool
	wait        time.Duration
	inflight    int
	maxInflight int
	arrived     chan struct{}
	arriveOnce  sync.Once

	// afterFinit, when set, runs as each finit_module call returns.
	afterFinit func(path string)
}

func newFake(seq *atomic.Int64) *fakeKernel {
	return &fakeKernel{seq: seq, names: map[string]string{}, finitErr: map[string]error{}, arrived: make(chan struct{})}
}

func (k *fakeKernel) FinitModule(fd int, params string, flags int) error {
	c := &call{fn: "finit", params: params, flags: flags, start: k.seq.Add(1)}
	p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return fmt.Errorf("fake kernel: fd %d: %w", fd, err)
	}
	c.file = p
	c.head = make([]byte, 6)
	n, _ := unix.Pread(fd, c.head, 0)
	c.head = c.head[:max(n, 0)]
	c.off, _ = unix.Seek(fd, 0, io.SeekCurrent)

	k.mu.Lock()
	c.name = k.names[p]
	k.calls = append(k.calls, c)
	rv := k.rendezvous[c.name]
	if rv {
		k.inflight++
		k.maxInflight = max(k.maxInflight, k.inflight)
		if k.inflight >= 2 {
			k.arriveOnce.Do(func() { close(k.arrived) })
		}
	}
	ferr := k.finitErr[c.name]
	if flags != 0 && k.finitFlagErr != nil {
		ferr = k.finitFlagErr
	}
	k.mu.Unlock()

	if rv {
		select {
		case <-k.arrived:
		case <-time.After(k.wait):
		}
		k.mu.Lock()
		k.inflight--
		k.mu.Unlock()
	}
	if k.afterFinit != nil {
		k.afterFinit(p)
	}
	c.end = k.seq.Add(1)
	return ferr
}

func (k *fakeKernel) InitModule(image []byte, params string) error {
	c := &call{fn: "init", params: params, image: image, head: image[:min(6, len(image))], start: k.seq.Add(1)}
	k.mu.Lock()
	k.calls = append(k.calls, c)
	err := k.initErr
	k.mu.Unlock()
	c.end = k.seq.Add(1)
	return err
}

// callsFor returns the calls made for a module name ("" for init_module calls).
func (k *fakeKernel) callsFor(name string) []*call {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []*call
	for _, c := range k.calls {
		if c.name == name {
			out = append(out, c)
		}
	}
	return out
}

// fixture is a temp module tree, a temp sysfs and a fake kernel.
type fixture struct {
	dir    string // holds the index's sets
	sys    string // SysRoot
	seq    atomic.Int64
	kernel *fakeKernel
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir(), sys: t.TempDir()}
	f.kernel = newFake(&f.seq)
	if err := os.MkdirAll(filepath.Join(f.sys, "module"), 0o755); err != nil {
		t.Fatal(err)
	}
	return f
}

// loader returns a loader on the fixture whose clock is the fake's sequence.
func (f *fixture) loader() *Loader {
	return &Loader{
		Release:  kver61,
		Vermagic: vermagic61,
		SysRoot:  f.sys,
		Kernel:   f.kernel,
		Now:      func() float64 { return float64(f.seq.Add(1)) },
		Parallel: 4,
		Phase:    "initramfs",
	}
}

// decompresses writes the fake sysfs's /sys/module/compression: the kernel
// decompresses modules of that format itself.
func (f *fixture) decompresses(t *testing.T, format string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(f.sys, "module"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.sys, "module", "compression"), []byte(format+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// loaded marks a module as present in the fake sysfs (built in or loaded earlier).
func (f *fixture) loaded(t *testing.T, name string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(f.sys, "module", name), 0o755); err != nil {
		t.Fatal(err)
	}
}

// set writes one set's module files (unless a module's Path is absolute and
// already exists) and returns the set. A module without Path gets <name>.ko
// holding a small fake ELF image; one without Vermagic gets vermagic61.
func (f *fixture) set(t *testing.T, id string, mods ...bootindex.Module) bootindex.Set {
	t.Helper()
	s := bootindex.Set{ID: id, Dir: id}
	if err := os.MkdirAll(filepath.Join(f.dir, id), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, m := range mods {
		if m.Vermagic == "" {
			m.Vermagic = vermagic61
		}
		if m.Path == "" {
			m.Path = m.Name + ".ko"
		}
		p := filepath.Join(f.dir, id, m.Path)
		if _, err := os.Stat(p); err != nil {
			if err := os.WriteFile(p, []byte("\x7fELF fake module "+m.Name+" of set "+id), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		f.kernel.names[p] = m.Name
		s.Modules = append(s.Modules, m)
	}
	return s
}

// index builds a coldplug index over the sets.
func (f *fixture) index(sets ...bootindex.Set) *coldplug.Index {
	ix := coldplug.NewIndex()
	ix.Add(f.dir, &bootindex.Index{Format: bootindex.FormatVersion, Kernel: kver61, Sets: sets}, nil)
	return ix
}

// load runs l.Load but fails the test instead of hanging when it does not return.
func load(t *testing.T, l *Loader, ix *coldplug.Index, names ...string) []report.Module {
	t.Helper()
	done := make(chan []report.Module, 1)
	go func() { done <- l.Load(ix, names) }()
	select {
	case got := <-done:
		return got
	case <-time.After(20 * time.Second):
		t.Fatalf("Load(%q) did not return within 20s (deadlock?)", names)
		return nil
	}
}

// byName indexes report entries by module name; a name seen twice keeps all entries.
func byName(ms []report.Module) map[string][]report.Module {
	out := map[string][]report.Module{}
	for _, m := range ms {
		out[m.Name] = append(out[m.Name], m)
	}
	return out
}

// one returns the single report entry for name, failing when there is not exactly one.
func one(t *testing.T, ms []report.Module, name string) report.Module {
	t.Helper()
	got := byName(ms)[name]
	if len(got) != 1 {
		t.Fatalf("report has %d entries for %s, want 1: %+v", len(got), name, ms)
	}
	return got[0]
}

func sha(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// moduleDir returns lib/modules/<kver> of an unpacked test kernel (testenv.KernelTree
// unpacks it through scripts/kernels.sh when absent, or fails the test).
func moduleDir(t *testing.T, kver string) string {
	t.Helper()
	return filepath.Join(testenv.KernelTree(t, kver), "lib", "modules", kver)
}

// tool runs a real program and returns its stdout, failing loudly when it is missing.
func tool(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Fatalf("%s is required by this test but not in PATH (%v): install it with scripts/deps.sh", name, err)
	}
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return out
}
