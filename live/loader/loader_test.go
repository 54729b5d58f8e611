package loader

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/kmodcache/modinfo"
	"golang.org/x/sys/unix"
)

func TestLoadDependencyOrder(t *testing.T) {
	f := newFixture(t)
	ix := f.index(f.set(t, "drv",
		bootindex.Module{Name: "a", Depends: []string{"b", "c"}},
		bootindex.Module{Name: "b"},
		bootindex.Module{Name: "c", Depends: []string{"d"}},
		bootindex.Module{Name: "d"},
	))
	got := load(t, f.loader(), ix, "a")

	if len(got) != 4 {
		t.Fatalf("Load(a) gave %d entries, want 4: %+v", len(got), got)
	}
	calls := map[string]*call{}
	for _, name := range []string{"a", "b", "c", "d"} {
		m := one(t, got, name)
		if m.Result != "loaded" || m.Errno != "" || m.Set != "drv" || m.Phase != "initramfs" {
			t.Errorf("Load(a): %s = %+v, want loaded from set drv in phase initramfs", name, m)
		}
		if want := filepath.Join(f.dir, "drv", name+".ko"); m.Path != want {
			t.Errorf("Load(a): %s path = %q, want %q", name, m.Path, want)
		}
		cs := f.kernel.callsFor(name)
		if len(cs) != 1 || cs[0].fn != "finit" || cs[0].flags != 0 {
			t.Fatalf("kernel calls for %s = %+v, want one finit_module with flags 0", name, cs)
		}
		if want := "\x7fELF f"; string(cs[0].head) != want {
			t.Errorf("fd given for %s starts with %q, want %q (the module file)", name, cs[0].head, want)
		}
		calls[name] = cs[0]
	}
	for _, e := range []struct{ first, then string }{{"d", "c"}, {"c", "a"}, {"b", "a"}} {
		if calls[e.first].end >= calls[e.then].start {
			t.Errorf("finit_module(%s) began at %d before finit_module(%s) returned at %d; want %s strictly after",
				e.then, calls[e.then].start, e.first, calls[e.first].end, e.then)
		}
		a, b := one(t, got, e.first), one(t, got, e.then)
		if a.End >= b.Start {
			t.Errorf("report: %s ended at %v, %s started at %v; want the dependency finished first", e.first, a.End, e.then, b.Start)
		}
	}
	for i := 1; i < len(got); i++ {
		if got[i-1].Start > got[i].Start {
			t.Errorf("report entries not sorted by start: %s at %v before %s at %v", got[i-1].Name, got[i-1].Start, got[i].Name, got[i].Start)
		}
	}
}

func TestLoadNormalizesNames(t *testing.T) {
	f := newFixture(t)
	ix := f.index(f.set(t, "drv",
		bootindex.Module{Name: "nvidia_drm", Depends: []string{"nvidia-modeset"}},
		bootindex.Module{Name: "nvidia_modeset"},
		// An index written with a file-style name is still found and reported in kernel form.
		bootindex.Module{Name: "odd-name"},
	))
	var (
		mu    sync.Mutex
		asked []string
	)
	l := f.loader()
	l.Params = func(name string) string {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, name)
		return ""
	}
	got := load(t, l, ix, "nvidia-drm", "odd_name")
	for _, name := range []string{"nvidia_drm", "nvidia_modeset", "odd_name"} {
		if m := one(t, got, name); m.Result != "loaded" {
			t.Errorf("Load(nvidia-drm, odd_name): %s = %+v, want loaded", name, m)
		}
	}
	slices.Sort(asked)
	if want := []string{"nvidia_drm", "nvidia_modeset", "odd_name"}; !slices.Equal(asked, want) {
		t.Errorf("Params asked for %q, want %q", asked, want)
	}
}

func TestLoadParallel(t *testing.T) {
	tests := []struct {
		parallel int
		wait     time.Duration
		want     int // most finit_module calls in flight at once
	}{
		{parallel: 2, wait: 10 * time.Second, want: 2},
		{parallel: 4, wait: 10 * time.Second, want: 2},
		{parallel: 1, wait: 300 * time.Millisecond, want: 1},
	}
	for _, tt := range tests {
		f := newFixture(t)
		f.kernel.rendezvous = map[string]bool{"x": true, "y": true}
		f.kernel.wait = tt.wait
		ix := f.index(f.set(t, "drv", bootindex.Module{Name: "x"}, bootindex.Module{Name: "y"}))
		l := f.loader()
		l.Parallel = tt.parallel
		start := time.Now()
		got := load(t, l, ix, "x", "y")
		if f.kernel.maxInflight != tt.want {
			t.Errorf("Parallel=%d: at most %d finit_module calls in flight, want %d", tt.parallel, f.kernel.maxInflight, tt.want)
		}
		if tt.want == 2 && time.Since(start) > tt.wait/2 {
			t.Errorf("Parallel=%d: Load took %v: the two calls did not meet", tt.parallel, time.Since(start))
		}
		for _, name := range []string{"x", "y"} {
			if m := one(t, got, name); m.Result != "loaded" {
				t.Errorf("Parallel=%d: %s = %+v, want loaded", tt.parallel, name, m)
			}
		}
	}
}

func TestLoadFailedDependencyNotAttempted(t *testing.T) {
	f := newFixture(t)
	f.kernel.finitErr["b"] = unix.ENODEV
	ix := f.index(f.set(t, "drv",
		bootindex.Module{Name: "a", Depends: []string{"b"}},
		bootindex.Module{Name: "b"},
		bootindex.Module{Name: "top", Depends: []string{"a"}},
		bootindex.Module{Name: "e", Depends: []string{"nope"}},
	))
	got := load(t, f.loader(), ix, "top", "e")

	tests := []struct {
		name, result, reason string
		calls                int
	}{
		{"b", "failed", "ENODEV", 1},
		{"a", "failed", "dependency b did not load", 0},
		{"top", "failed", "dependency a did not load: dependency b did not load", 0},
		{"nope", "failed", "no module named nope in the boot index", 0},
		{"e", "failed", "dependency nope did not load: no module named nope", 0},
	}
	for _, tt := range tests {
		m := one(t, got, tt.name)
		if m.Result != tt.result || !strings.Contains(m.Reason, tt.reason) {
			t.Errorf("Load: %s = %q (%q), want %q with reason containing %q", tt.name, m.Result, m.Reason, tt.result, tt.reason)
		}
		if n := len(f.kernel.callsFor(tt.name)); n != tt.calls {
			t.Errorf("kernel saw %d calls for %s, want %d", n, tt.name, tt.calls)
		}
	}
}

// TestCheckVermagicRealModules compares vermagic strings read from real Debian
// kernels' modules: two modules of one kernel agree; a 6.12 module is refused on 6.1.
func TestCheckVermagicRealModules(t *testing.T) {
	dir61, dir612 := moduleDir(t, kver61), moduleDir(t, kver612)
	read := func(p string) string {
		t.Helper()
		info, err := modinfo.ReadFile(p)
		if err != nil {
			t.Fatalf("modinfo.ReadFile(%s): %v", p, err)
		}
		return info.Vermagic
	}
	pci61 := read(filepath.Join(dir61, "kernel/drivers/virtio/virtio_pci.ko"))
	blk61 := read(filepath.Join(dir61, "kernel/drivers/block/virtio_blk.ko"))
	input612 := read(filepath.Join(dir612, "kernel/drivers/virtio/virtio_input.ko.xz"))
	tests := []struct {
		name, vm, release, kernel string
		refused                   bool
	}{
		{"6.1 module on 6.1", blk61, kver61, pci61, false},
		{"6.12 module on 6.12", input612, kver612, "", false},
		{"6.12 module on 6.1", input612, kver61, pci61, true},
		{"6.1 module on 6.12", blk61, kver612, input612, true},
	}
	for _, tt := range tests {
		got := modinfo.CheckVermagic(tt.vm, tt.release, tt.kernel)
		if (got != "") != tt.refused {
			t.Errorf("%s: CheckVermagic(%q, %q, %q) = %q, want refused=%v", tt.name, tt.vm, tt.release, tt.kernel, got, tt.refused)
		}
	}
}

func TestLoadRefusesVermagicBeforeSyscall(t *testing.T) {
	f := newFixture(t)
	ix := f.index(f.set(t, "drv",
		bootindex.Module{Name: "w", Vermagic: kver612 + " SMP preempt mod_unload modversions "},
		bootindex.Module{Name: "m", Vermagic: kver61 + " SMP preempt mod_unload "},
		bootindex.Module{Name: "user", Depends: []string{"w"}},
	))
	l := f.loader()
	got := load(t, l, ix, "user", "m")
	for _, name := range []string{"w", "m", "user"} {
		if cs := f.kernel.callsFor(name); len(cs) != 0 {
			t.Errorf("kernel saw %d calls for %s, want none (refused before the syscall)", len(cs), name)
		}
	}
	tests := []struct {
		name    string
		results []string
		reason  string
	}{
		{"w", []string{"refused"}, "built for kernel " + kver612},
		{"m", []string{"refused"}, "vermagic mismatch: module"},
		{"user", []string{"failed"}, "dependency w did not load: every candidate refused"},
	}
	for _, tt := range tests {
		ms := byName(got)[tt.name]
		var results []string
		for _, m := range ms {
			results = append(results, m.Result)
			if !strings.Contains(m.Reason, tt.reason) {
				t.Errorf("%s %s reason = %q, want it to contain %q", tt.name, m.Result, m.Reason, tt.reason)
			}
		}
		if strings.Join(results, ",") != strings.Join(tt.results, ",") {
			t.Errorf("report results for %s = %v, want %v", tt.name, results, tt.results)
		}
	}
	// A file is reported as refused once, not on every later Load.
	again := load(t, l, ix, "w")
	if rs := byName(again)["w"]; len(rs) != 0 {
		t.Errorf("second Load(w) = %+v, want no entry (the refusal was already reported)", rs)
	}
}

func TestLoadSecondCandidate(t *testing.T) {
	f := newFixture(t)
	old := f.set(t, "old", bootindex.Module{Name: "nvidia", Vermagic: kver612 + " SMP preempt mod_unload modversions "})
	good := f.set(t, "good", bootindex.Module{Name: "nvidia"})
	got := load(t, f.loader(), f.index(old, good), "nvidia")

	if len(got) != 2 {
		t.Fatalf("Load(nvidia) = %+v, want a refusal and a load", got)
	}
	tests := []struct{ result, set string }{{"refused", "old"}, {"loaded", "good"}}
	for i, tt := range tests {
		want := filepath.Join(f.dir, tt.set, "nvidia.ko")
		if got[i].Result != tt.result || got[i].Set != tt.set || got[i].Path != want {
			t.Errorf("Load(nvidia)[%d] = %s from %s (%s), want %s from %s (%s)", i, got[i].Result, got[i].Set, got[i].Path, tt.result, tt.set, want)
		}
	}
	cs := f.kernel.callsFor("nvidia")
	if len(cs) != 1 || cs[0].file != filepath.Join(f.dir, "good", "nvidia.ko") {
		t.Errorf("kernel calls for nvidia = %+v, want one, for the good set's file", cs)
	}
}

func TestLoadDigest(t *testing.T) {
	tests := []struct {
		name   string
		verify bool
		sha    func(path string) string
		result string
		reason string
		calls  int
	}{
		{"matching digest", true, func(p string) string { return sha(t, p) }, "loaded", "", 1},
		{"wrong digest", true, func(string) string { return strings.Repeat("ab", 32) }, "refused", "digest mismatch: file sha256 ", 0},
		{"wrong digest, verification off", false, func(string) string { return strings.Repeat("ab", 32) }, "loaded", "", 1},
		{"no digest in index", true, func(string) string { return "" }, "loaded", "", 1},
	}
	for _, tt := range tests {
		f := newFixture(t)
		s := f.set(t, "drv", bootindex.Module{Name: "g"})
		s.Modules[0].SHA256 = tt.sha(filepath.Join(f.dir, "drv", "g.ko"))
		l := f.loader()
		l.VerifyDigest = tt.verify
		m := one(t, load(t, l, f.index(s), "g"), "g")
		if m.Result != tt.result || !strings.Contains(m.Reason, tt.reason) {
			t.Errorf("%s: Load(g) = %q (%q), want %q with reason containing %q", tt.name, m.Result, m.Reason, tt.result, tt.reason)
		}
		cs := f.kernel.callsFor("g")
		if len(cs) != tt.calls {
			t.Fatalf("%s: kernel saw %d calls, want %d", tt.name, len(cs), tt.calls)
		}
		if len(cs) == 1 && cs[0].off != 0 {
			t.Errorf("%s: fd offset at finit_module = %d, want 0 (file rewound after hashing)", tt.name, cs[0].off)
		}
	}
}

func TestLoadErrno(t *testing.T) {
	tests := []struct {
		err        error
		result     string
		errno      string
		reason     string
		dependents string // result of a module depending on it
	}{
		{nil, "loaded", "", "", "loaded"},
		{unix.EEXIST, "already loaded", "EEXIST", "", "loaded"},
		{unix.ENODEV, "failed", "ENODEV", "found no device", "failed"},
		{unix.ENOEXEC, "failed", "ENOEXEC", "ENOEXEC", "failed"},
		{unix.ENOENT, "failed", "ENOENT", "firmware", "failed"},
		{unix.EKEYREJECTED, "failed", "EKEYREJECTED", "signature rejected", "failed"},
		{unix.EINVAL, "failed", "EINVAL", "unknown symbols", "failed"},
		{unix.EPERM, "failed", "EPERM", "operation not permitted", "failed"},
		{errors.New("odd"), "failed", "", "odd", "failed"},
	}
	for _, tt := range tests {
		f := newFixture(t)
		f.kernel.finitErr["k"] = tt.err
		ix := f.index(f.set(t, "drv", bootindex.Module{Name: "k"}, bootindex.Module{Name: "user", Depends: []string{"k"}}))
		got := load(t, f.loader(), ix, "user")
		m := one(t, got, "k")
		if m.Result != tt.result || m.Errno != tt.errno || !strings.Contains(m.Reason, tt.reason) {
			t.Errorf("finit_module(k) = %v: entry %q errno %q (%q), want %q errno %q with reason containing %q",
				tt.err, m.Result, m.Errno, m.Reason, tt.result, tt.errno, tt.reason)
		}
		if u := one(t, got, "user"); u.Result != tt.dependents {
			t.Errorf("finit_module(k) = %v: dependent user = %q (%q), want %q", tt.err, u.Result, u.Reason, tt.dependents)
		}
		if n := len(f.kernel.callsFor("k")); n != 1 {
			t.Errorf("finit_module(k) = %v: kernel saw %d calls for k, want 1 (no retry)", tt.err, n)
		}
	}
}

func TestLoadAlreadyPresent(t *testing.T) {
	f := newFixture(t)
	f.loaded(t, "b")
	ix := f.index(f.set(t, "drv", bootindex.Module{Name: "a", Depends: []string{"b"}}, bootindex.Module{Name: "b"}))
	got := load(t, f.loader(), ix, "a")
	if rs := byName(got)["b"]; len(rs) != 0 {
		t.Errorf("b (a dependency already present) has entries %+v, want none: only requested modules are reported as already loaded", rs)
	}
	if m := one(t, load(t, f.loader(), ix, "b"), "b"); m.Result != "already loaded" || !strings.Contains(m.Reason, "/sys/module") {
		t.Errorf("b requested and present in sysfs: entry = %+v, want already loaded", m)
	}
	if m := one(t, got, "a"); m.Result != "loaded" {
		t.Errorf("a (depends on present b): entry = %+v, want loaded", m)
	}
	if n := len(f.kernel.callsFor("b")); n != 0 {
		t.Errorf("kernel saw %d calls for present module b, want 0", n)
	}
}

// TestLoadCompressed loads a real .ko.xz of the Debian 6.12 cloud kernel through
// the fake kernel: finit_module is asked to decompress (flags 4) and, when the
// kernel cannot, init_module receives the image xz itself decompresses to.
func TestLoadCompressed(t *testing.T) {
	src := filepath.Join(moduleDir(t, kver612), "kernel/drivers/virtio/virtio_input.ko.xz")
	raw, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	plain := tool(t, "xz", "-dc", src)
	if !bytes.HasPrefix(plain, []byte("\x7fELF")) {
		t.Fatalf("xz -dc %s does not give an ELF file", src)
	}
	tests := []struct {
		name        string
		sysfs       string // /sys/module/compression, "" for none
		compression string
		finitErr    error
		initErr     error
		flip        bool // the file's last byte differs from what the index hashed
		wantFinit   bool
		wantInit    bool
		result      string
		errno       string
	}{
		{"kernel decompresses", "xz", "xz", nil, nil, false, true, false, "loaded", ""},
		{"EOPNOTSUPP falls back to init_module", "xz", "xz", unix.EOPNOTSUPP, nil, false, true, true, "loaded", ""},
		{"EINVAL (old kernel) falls back to init_module", "xz", "xz", unix.EINVAL, nil, false, true, true, "loaded", ""},
		{"fallback fails too", "xz", "xz", unix.EOPNOTSUPP, unix.ENODEV, false, true, true, "failed", "ENODEV"},
		{"fallback says EEXIST", "xz", "xz", unix.EOPNOTSUPP, unix.EEXIST, false, true, true, "already loaded", "EEXIST"},
		{"no decompression in the kernel: /init's, no finit_module", "", "xz", nil, nil, false, false, true, "loaded", ""},
		{"the kernel decompresses zstd only: /init's", "zstd", "xz", nil, nil, false, false, true, "loaded", ""},
		{"/init's decompression, init fails", "", "xz", nil, unix.ENODEV, false, false, true, "failed", "ENODEV"},
		{"/init's decompression, a changed byte", "", "xz", nil, nil, true, false, false, "refused", ""},
		{"the kernel's decompression, a changed byte", "xz", "xz", nil, nil, true, false, false, "refused", ""},
	}
	for _, tt := range tests {
		f := newFixture(t)
		f.kernel.finitFlagErr = tt.finitErr
		f.kernel.initErr = tt.initErr
		if tt.sysfs != "" {
			f.decompresses(t, tt.sysfs)
		}
		if err := os.MkdirAll(filepath.Join(f.dir, "k"), 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(f.dir, "k", "virtio_input.ko.xz")
		if err := os.WriteFile(p, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		s := f.set(t, "k", bootindex.Module{Name: "virtio_input", Path: "virtio_input.ko.xz", Compression: tt.compression,
			Vermagic: kver612 + " SMP preempt mod_unload modversions "})
		s.Modules[0].SHA256 = sha(t, p)
		if tt.flip {
			changed := bytes.Clone(raw)
			changed[len(changed)-1] ^= 1
			if err := os.WriteFile(p, changed, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		l := f.loader()
		l.Release, l.Vermagic, l.VerifyDigest = kver612, "", true
		l.Params = func(name string) string { return map[string]string{"virtio_input": "dyndbg=+p"}[name] }
		m := one(t, load(t, l, f.index(s), "virtio_input"), "virtio_input")
		if m.Result != tt.result || m.Errno != tt.errno {
			t.Errorf("%s: entry %q errno %q (%q), want %q errno %q", tt.name, m.Result, m.Errno, m.Reason, tt.result, tt.errno)
		}
		if tt.flip && !strings.Contains(m.Reason, "digest mismatch") {
			t.Errorf("%s: reason %q, want a digest mismatch", tt.name, m.Reason)
		}
		wantDecompress := ""
		switch {
		case tt.wantInit:
			wantDecompress = "userspace"
		case tt.wantFinit:
			wantDecompress = "kernel"
		}
		if m.Decompress != wantDecompress {
			t.Errorf("%s: entry decompressed by %q, want %q", tt.name, m.Decompress, wantDecompress)
		}
		if !tt.flip && m.Verified != "sha256" {
			t.Errorf("%s: checked by %q, want sha256", tt.name, m.Verified)
		}
		fc := f.kernel.callsFor("virtio_input")
		switch {
		case !tt.wantFinit && len(fc) != 0:
			t.Errorf("%s: finit_module calls = %+v, want none", tt.name, fc)
		case tt.wantFinit && (len(fc) != 1 || fc[0].flags != 4 || string(fc[0].head) != "\xfd7zXZ\x00" || fc[0].params != "dyndbg=+p"):
			t.Errorf("%s: finit_module calls = %+v, want one with flags 4 (MODULE_INIT_COMPRESSED_FILE) on the xz file, params dyndbg=+p", tt.name, fc)
		}
		ic := f.kernel.callsFor("")
		if !tt.wantInit {
			if len(ic) != 0 {
				t.Errorf("%s: %d init_module calls, want none", tt.name, len(ic))
			}
			continue
		}
		if len(ic) != 1 {
			t.Fatalf("%s: %d init_module calls, want 1", tt.name, len(ic))
		}
		if string(ic[0].head[:4]) != "\x7fELF" || !bytes.Equal(ic[0].image, plain) || ic[0].params != "dyndbg=+p" {
			t.Errorf("%s: init_module got %d bytes starting %q params %q, want the %d bytes of xz -dc starting \"\\x7fELF\", params dyndbg=+p",
				tt.name, len(ic[0].image), ic[0].head, ic[0].params, len(plain))
		}
		if tt.wantFinit && ic[0].start < fc[0].end {
			t.Errorf("%s: init_module began before finit_module returned", tt.name)
		}
		if !tt.wantFinit && (m.ReadTime <= 0 || m.DigestTime <= 0 || m.DecompressTime <= 0) {
			t.Errorf("%s: read %v, digest %v, decompression %v: want each step timed", tt.name, m.ReadTime, m.DigestTime, m.DecompressTime)
		}
	}
}

// TestLoadDecompressRefusesOtherSize checks that a module /init would read
// whole to decompress is refused unread when its size is not the index's
// (a file grown past the module, as an endless one would be).
func TestLoadDecompressRefusesOtherSize(t *testing.T) {
	f := newFixture(t)
	if err := os.MkdirAll(filepath.Join(f.dir, "k"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(f.dir, "k", "m.ko.zst")
	good := []byte("\x28\xb5\x2f\xfd not decompressed before the size is checked")
	if err := os.WriteFile(p, good, 0o644); err != nil {
		t.Fatal(err)
	}
	s := f.set(t, "k", bootindex.Module{Name: "m", Path: "m.ko.zst", Compression: "zstd", SHA256: sha(t, p), Size: int64(len(good))})
	if err := os.WriteFile(p, append(good, make([]byte, 1<<20)...), 0o644); err != nil {
		t.Fatal(err)
	}
	l := f.loader()
	l.VerifyDigest = true
	m := one(t, load(t, l, f.index(s), "m"), "m")
	if m.Result != "refused" || !strings.Contains(m.Reason, "size mismatch") || m.ReadTime != 0 {
		t.Errorf("entry %q (%q), read %v s; want refused for its size, unread", m.Result, m.Reason, m.ReadTime)
	}
	if n := len(f.kernel.callsFor("")) + len(f.kernel.callsFor("m")); n != 0 {
		t.Errorf("%d loading calls, want none", n)
	}
}

// TestLoadPlainNoFallback checks a plain .ko is given to finit_module with flags 0
// and an EOPNOTSUPP from the kernel is not retried through init_module.
func TestLoadPlainNoFallback(t *testing.T) {
	for _, compression := range []string{"", "none"} {
		f := newFixture(t)
		f.kernel.finitErr["p"] = unix.EOPNOTSUPP
		s := f.set(t, "drv", bootindex.Module{Name: "p", Compression: compression})
		m := one(t, load(t, f.loader(), f.index(s), "p"), "p")
		// Linux's EOPNOTSUPP and ENOTSUP are one number, which x/sys names ENOTSUP.
		if want := unix.ErrnoName(unix.EOPNOTSUPP); m.Result != "failed" || m.Errno != want || m.Decompress != "" {
			t.Errorf("compression %q: entry %q errno %q decompress %q, want failed %s, no decompression", compression, m.Result, m.Errno, m.Decompress, want)
		}
		if fc := f.kernel.callsFor("p"); len(fc) != 1 || fc[0].flags != 0 {
			t.Errorf("compression %q: finit_module calls = %+v, want one with flags 0", compression, fc)
		}
		if ic := f.kernel.callsFor(""); len(ic) != 0 {
			t.Errorf("compression %q: %d init_module calls, want none", compression, len(ic))
		}
	}
}

func TestLoadSoftdep(t *testing.T) {
	f := newFixture(t)
	f.kernel.finitErr["broken"] = unix.ENOENT
	f.loaded(t, "builtin_pre")
	ix := f.index(f.set(t, "drv",
		bootindex.Module{Name: "a", SoftPre: []string{"pre-a"}},
		bootindex.Module{Name: "pre_a"},
		bootindex.Module{Name: "b", SoftPre: []string{"absent"}},
		bootindex.Module{Name: "c", SoftPre: []string{"broken"}},
		bootindex.Module{Name: "broken"},
		bootindex.Module{Name: "d", SoftPre: []string{"builtin_pre"}},
	))
	got := load(t, f.loader(), ix, "a", "b", "c", "d")

	tests := []struct {
		name, result string
		after        string // a module whose call must have returned before this one's began
	}{
		{"pre_a", "loaded", ""},
		{"a", "loaded", "pre_a"},
		{"b", "loaded", ""},
		{"broken", "failed", ""},
		{"c", "loaded", "broken"}, // a failed soft dependency does not stop the module
		{"d", "loaded", ""},
	}
	if rs := byName(got)["builtin_pre"]; len(rs) != 0 {
		t.Errorf("softdep builtin_pre (already present) has entries %+v, want none", rs)
	}
	for _, tt := range tests {
		if m := one(t, got, tt.name); m.Result != tt.result {
			t.Errorf("softdep: %s = %q (%q), want %q", tt.name, m.Result, m.Reason, tt.result)
		}
		if tt.after == "" {
			continue
		}
		pre, mod := f.kernel.callsFor(tt.after), f.kernel.callsFor(tt.name)
		if len(pre) != 1 || len(mod) != 1 || pre[0].end >= mod[0].start {
			t.Errorf("softdep: calls %s=%+v %s=%+v, want one each, %s first", tt.after, pre, tt.name, mod, tt.after)
		}
	}
	if ms := byName(got)["absent"]; len(ms) != 0 {
		t.Errorf("softdep on a module not in the index reported %+v, want it ignored", ms)
	}
}

// TestLoadSoftdepAliases: soft dependencies are modprobe arguments, so an
// alias finds every module that declares it (ext4's "pre: crypto-crc32c" on
// Debian's generic kernel is crc32c_generic and crc32c_intel), and "post:"
// modules load after the module that names them.
func TestLoadSoftdepAliases(t *testing.T) {
	f := newFixture(t)
	ix := f.index(f.set(t, "fs",
		bootindex.Module{Name: "ext4", Depends: []string{"jbd2"}, SoftPre: []string{"crypto-crc32c"}},
		bootindex.Module{Name: "jbd2", SoftPre: []string{"crypto-crc32c"}},
		bootindex.Module{Name: "crc32c_intel", Aliases: []string{"crypto-crc32c-intel", "crc32c", "crypto-crc32c"}},
		bootindex.Module{Name: "crc32c_generic", Aliases: []string{"crypto-crc32c-generic", "crc32c", "crypto-crc32c"}},
		bootindex.Module{Name: "vfio", SoftPost: []string{"vfio-iommu-type1", "vfio_iommu_spapr_tce"}},
		bootindex.Module{Name: "vfio_iommu_type1", Depends: []string{"vfio"}},
		bootindex.Module{Name: "unrelated", Aliases: []string{"crypto-sha256"}},
	))
	got := load(t, f.loader(), ix, "ext4", "vfio")

	tests := []struct{ before, after string }{
		{"crc32c_generic", "jbd2"},
		{"crc32c_intel", "jbd2"},
		{"crc32c_generic", "ext4"},
		{"jbd2", "ext4"},
		{"vfio", "vfio_iommu_type1"},
	}
	for _, tt := range tests {
		for _, name := range []string{tt.before, tt.after} {
			if m := one(t, got, name); m.Result != "loaded" {
				t.Errorf("softdep aliases: %s = %q (%q), want loaded", name, m.Result, m.Reason)
			}
		}
		b, a := f.kernel.callsFor(tt.before), f.kernel.callsFor(tt.after)
		if len(b) != 1 || len(a) != 1 || b[0].end >= a[0].start {
			t.Errorf("softdep aliases: calls %s=%+v %s=%+v, want one each, %s first", tt.before, b, tt.after, a, tt.before)
		}
	}
	for _, name := range []string{"unrelated", "vfio_iommu_spapr_tce", "crypto_crc32c"} {
		if ms := byName(got)[name]; len(ms) != 0 {
			t.Errorf("softdep aliases: %s has entries %+v, want none", name, ms)
		}
	}
}

func TestLoadCycle(t *testing.T) {
	f := newFixture(t)
	ix := f.index(f.set(t, "drv",
		bootindex.Module{Name: "a", Depends: []string{"b"}},
		bootindex.Module{Name: "b", Depends: []string{"a"}},
		bootindex.Module{Name: "self", Depends: []string{"self"}},
		bootindex.Module{Name: "x", Depends: []string{"y"}},
		bootindex.Module{Name: "y", Depends: []string{"z"}},
		bootindex.Module{Name: "z", Depends: []string{"x"}},
		bootindex.Module{Name: "s1", SoftPre: []string{"s2"}},
		bootindex.Module{Name: "s2", Depends: []string{"s1"}},
		bootindex.Module{Name: "free"},
	))
	got := load(t, f.loader(), ix, "a", "self", "x", "s1", "free")

	tests := []struct {
		name, result, reason string
	}{
		{"a", "failed", "dependency cycle: a -> b -> a"},
		{"b", "failed", "dependency cycle: a -> b -> a"},
		{"self", "failed", "dependency cycle: self -> self"},
		{"x", "failed", "dependency cycle: x -> y -> z -> x"},
		{"y", "failed", "dependency cycle: x -> y -> z -> x"},
		{"z", "failed", "dependency cycle: x -> y -> z -> x"},
		// s2 needs s1, which only asks (softly) for s2 first: s2 cannot load before s1
		// so it fails, and s1 loads anyway.
		{"s2", "failed", "dependency cycle: s1 -> s2 -> s1"},
		{"s1", "loaded", ""},
		{"free", "loaded", ""},
	}
	for _, tt := range tests {
		m := one(t, got, tt.name)
		if m.Result != tt.result || !strings.Contains(m.Reason, tt.reason) {
			t.Errorf("cycle: %s = %q (%q), want %q with reason containing %q", tt.name, m.Result, m.Reason, tt.result, tt.reason)
		}
		wantCalls := 0
		if tt.result == "loaded" {
			wantCalls = 1
		}
		if n := len(f.kernel.callsFor(tt.name)); n != wantCalls {
			t.Errorf("cycle: kernel saw %d calls for %s, want %d", n, tt.name, wantCalls)
		}
	}
}

func TestLoadParams(t *testing.T) {
	f := newFixture(t)
	ix := f.index(f.set(t, "drv",
		bootindex.Module{Name: "nvidia"},
		bootindex.Module{Name: "nvidia_uvm", Depends: []string{"nvidia"}},
		bootindex.Module{Name: "plain"},
	))
	params := map[string]string{"nvidia": "NVreg_OpenRmEnableUnsupportedGpus=1 NVreg_EnableGpuFirmware=0", "nvidia_uvm": "uvm_perf_prefetch_enable=0"}
	l := f.loader()
	l.Params = func(name string) string { return params[name] }
	got := load(t, l, ix, "nvidia_uvm", "plain")
	for _, name := range []string{"nvidia", "nvidia_uvm", "plain"} {
		if m := one(t, got, name); m.Result != "loaded" {
			t.Errorf("%s = %+v, want loaded", name, m)
		}
		cs := f.kernel.callsFor(name)
		if len(cs) != 1 || cs[0].params != params[name] {
			t.Errorf("finit_module(%s) calls = %+v, want one with params %q", name, cs, params[name])
		}
	}
}

// TestLoadMissingFileNamedOnce: a module file that is gone fails with the
// open error, which names the file once ("open X: no such file or
// directory", not "open X: open X: …").
func TestLoadMissingFileNamedOnce(t *testing.T) {
	f := newFixture(t)
	s := f.set(t, "drv", bootindex.Module{Name: "g"})
	file := filepath.Join(f.dir, "drv", "g.ko")
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	m := one(t, load(t, f.loader(), f.index(s), "g"), "g")
	if m.Result != "failed" || strings.Count(m.Reason, file) != 1 || !strings.Contains(m.Reason, "no such file") {
		t.Errorf("Load(g) with %s gone = %q (%q), want failed, naming the file once", file, m.Result, m.Reason)
	}
}

// TestLoadStepTimes checks that an insert records where its time went: the
// digest pass's reading and hashing, userspace decompression, and when the
// loading system call was made (between the steps before it and its return).
func TestLoadStepTimes(t *testing.T) {
	src := filepath.Join(moduleDir(t, kver612), "kernel/drivers/virtio/virtio_input.ko.xz")
	raw, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name                   string
		sysfs                  string // /sys/module/compression, "" for none
		verify                 bool
		finitErr               error
		wantDigest, wantUnpack bool
		wantCall               string // the call Called must precede: "finit" or "init"
	}{
		{"digest, kernel decompresses", "xz", true, nil, true, false, "finit"},
		{"no digest pass", "xz", false, nil, false, false, "finit"},
		{"digest, the kernel refuses: userspace decompression", "xz", true, unix.EOPNOTSUPP, true, true, "init"},
		{"digest and userspace decompression side by side", "", true, nil, true, true, "init"},
	}
	for _, tt := range tests {
		f := newFixture(t)
		f.kernel.finitFlagErr = tt.finitErr
		if tt.sysfs != "" {
			f.decompresses(t, tt.sysfs)
		}
		if err := os.MkdirAll(filepath.Join(f.dir, "k"), 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(f.dir, "k", "virtio_input.ko.xz")
		if err := os.WriteFile(p, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		s := f.set(t, "k", bootindex.Module{Name: "virtio_input", Path: "virtio_input.ko.xz", Compression: "xz",
			Vermagic: kver612 + " SMP preempt mod_unload modversions ", SHA256: sha(t, p)})
		l := f.loader()
		l.Release, l.Vermagic, l.VerifyDigest = kver612, "", tt.verify
		m := one(t, load(t, l, f.index(s), "virtio_input"), "virtio_input")
		if m.Result != "loaded" {
			t.Fatalf("%s: entry %q (%q), want loaded", tt.name, m.Result, m.Reason)
		}
		if got, want := m.ReadTime > 0 && m.DigestTime > 0, tt.wantDigest; got != want {
			t.Errorf("%s: read %v s, digest %v s recorded = %v, want %v", tt.name, m.ReadTime, m.DigestTime, got, want)
		}
		if got, want := m.DecompressTime > 0, tt.wantUnpack; got != want {
			t.Errorf("%s: decompression %v s recorded = %v, want %v", tt.name, m.DecompressTime, got, want)
		}
		cs := f.kernel.callsFor("virtio_input")
		if tt.wantCall == "init" {
			cs = f.kernel.callsFor("")
		}
		if len(cs) != 1 {
			t.Fatalf("%s: %d %s calls, want 1", tt.name, len(cs), tt.wantCall)
		}
		steps := m.ReadTime + m.DigestTime + m.DecompressTime
		if tt.sysfs == "" { // hashing and decompressing overlap
			steps = m.ReadTime + max(m.DigestTime, m.DecompressTime)
		}
		if got := float64(cs[0].start); !(m.Start+steps < m.Called && m.Called < got && float64(cs[0].end) < m.End) {
			t.Errorf("%s: start %v, steps %v+%v+%v, called %v, %s call from %v to %d, end %v: want the steps, then Called, then the call, then End",
				tt.name, m.Start, m.ReadTime, m.DigestTime, m.DecompressTime, m.Called, tt.wantCall, got, cs[0].end, m.End)
		}
	}
}

// TestLoadDecompressesWhatWasChecked checks that a module the kernel cannot
// decompress is decompressed from the file as opened and checked: one put in
// its place after the check (here, while the kernel refused the format) is
// not what init_module gets.
func TestLoadDecompressesWhatWasChecked(t *testing.T) {
	src := filepath.Join(moduleDir(t, kver612), "kernel/drivers/virtio/virtio_input.ko.xz")
	raw, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	f.decompresses(t, "xz") // says it does, then refuses
	f.kernel.finitFlagErr = unix.EOPNOTSUPP
	if err := os.MkdirAll(filepath.Join(f.dir, "k"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(f.dir, "k", "virtio_input.ko.xz")
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	f.kernel.afterFinit = func(path string) {
		// Another file under the checked one's name: a rename, as an
		// attacker with the directory would do it.
		swap := p + ".swap"
		if err := os.WriteFile(swap, []byte("\xfd7zXZ\x00 not the checked module"), 0o644); err != nil {
			t.Error(err)
		}
		if err := os.Rename(swap, p); err != nil {
			t.Error(err)
		}
	}
	s := f.set(t, "k", bootindex.Module{Name: "virtio_input", Path: "virtio_input.ko.xz", Compression: "xz",
		Vermagic: kver612 + " SMP preempt mod_unload modversions "})
	s.Modules[0].SHA256 = sha(t, p)
	l := f.loader()
	l.Release, l.Vermagic, l.VerifyDigest = kver612, "", true
	m := one(t, load(t, l, f.index(s), "virtio_input"), "virtio_input")
	if m.Result != "loaded" || m.Decompress != "userspace" {
		t.Fatalf("entry %q (%q), decompressed by %q; want loaded, in userspace", m.Result, m.Reason, m.Decompress)
	}
	ic := f.kernel.callsFor("")
	want := tool(t, "xz", "-dc", src)
	if len(ic) != 1 {
		t.Fatalf("%d init_module calls, want 1", len(ic))
	}
	if !bytes.Equal(ic[0].image, want) {
		t.Errorf("init_module got %d bytes starting %q, want the checked module's %d bytes", len(ic[0].image), ic[0].head, len(want))
	}
}
