// Package loader inserts kernel modules the way modprobe would, without it: it
// resolves dependencies from a boot index, refuses modules that cannot load on the
// running kernel (wrong vermagic, wrong digest) before calling the kernel, and calls
// finit_module in parallel while keeping every module behind its dependencies.
package loader

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/kpreload/kpreload/kmodcache/fsverity"
	"github.com/kpreload/kpreload/kmodcache/modinfo"
	"github.com/kpreload/kpreload/kmodcache/modname"
	"github.com/kpreload/kpreload/kmodcache/modorder"
	"github.com/kpreload/kpreload/live/coldplug"
	"github.com/kpreload/kpreload/report"
	"golang.org/x/sys/unix"
)

// Kernel is the system-call surface the loader needs; tests substitute a fake.
type Kernel interface {
	// FinitModule loads a module from an open file (finit_module(2)).
	FinitModule(fd int, params string, flags int) error
	// InitModule loads a module from an uncompressed image in memory (init_module(2)).
	InitModule(image []byte, params string) error
}

// System is the real kernel.
type System struct{}

// FinitModule calls finit_module(2).
func (System) FinitModule(fd int, params string, flags int) error {
	return unix.FinitModule(fd, params, flags)
}

// InitModule calls init_module(2).
func (System) InitModule(image []byte, params string) error { return unix.InitModule(image, params) }

// VerityKernel is the fs-verity surface the loader needs; tests substitute a fake.
type VerityKernel interface {
	// MeasureVerity returns the fs-verity digest the kernel holds for an
	// open file (fsverity.Measure), an error fsverity.Absent accepts when
	// the file has none.
	MeasureVerity(fd int) (string, error)
	// EnableVerity starts turning fs-verity on for an open, read-only file
	// and does not wait for it.
	EnableVerity(fd int) error
}

// MeasureVerity calls FS_IOC_MEASURE_VERITY.
func (System) MeasureVerity(fd int) (string, error) { return fsverity.Measure(fd) }

// EnableVerity calls FS_IOC_ENABLE_VERITY in a forked child process at the
// lowest priority and leaves it running: the kernel reads the file again
// (from the page cache, as it was just loaded) to build its Merkle tree,
// which nothing at boot needs to wait for. The child holds its own copy
// of fd; whoever is pid 1 when it exits reaps it.
func (System) EnableVerity(fd int) error {
	arg := fsverity.NewEnableArg()
	_, err := forkCall(19, unix.SYS_IOCTL, uintptr(fd), unix.FS_IOC_ENABLE_VERITY, uintptr(unsafe.Pointer(arg)))
	runtime.KeepAlive(arg)
	return err
}

// Loader loads modules for one running kernel.
type Loader struct {
	// Release is the running kernel's release (uname -r).
	Release string
	// Vermagic is the running kernel's full vermagic string if known (from its own
	// modules); when empty only the release is compared.
	Vermagic string
	// SysRoot is where sysfs is mounted ("/sys"); used to see loaded and built-in modules.
	SysRoot string
	// Kernel performs the system calls; nil means System.
	Kernel Kernel
	// Params returns the module parameters for a module (from the kernel command line).
	Params func(name string) string
	// Now returns the time in seconds since kernel start.
	Now func() float64
	// Parallel bounds concurrent loads; <= 0 means 4.
	Parallel int
	// VerifyDigest checks each file against the index's digests before
	// loading: its fs-verity digest as the kernel measures it where the
	// file has fs-verity on and the index records one, else its sha256.
	VerifyDigest bool
	// EnableVerity, with VerifyDigest, turns fs-verity on (in the
	// background, VerityKernel.EnableVerity) for a file the kernel was
	// handed after its sha256 matched (whatever the module's init then
	// returned), whose index entry records a verity digest and
	// whose filesystem supports fs-verity: the next boot measures it
	// instead of reading it. The filesystem must be mounted read-write.
	EnableVerity bool
	// Verity asks the kernel about fs-verity; nil means System.
	Verity VerityKernel
	// Phase labels the report entries ("initramfs", "rootfs").
	Phase string
	// SigEnforced says the kernel refuses unsigned modules (module.sig_enforce=1,
	// lockdown): a module the index records as unsigned is refused before the
	// kernel is called, with that reason. A module signed with a key the kernel
	// does not trust is still handed to the kernel, which refuses it (EKEYREJECTED).
	SigEnforced bool
	// Isolate, when set, says which modules load in a child process (a fork
	// of this one that only calls finit_module) under a deadline, Timeout:
	// one whose init blocks (a GPU that never answers) is recorded as
	// ResultLoading and left to finish in the background, blocking nothing
	// else. Loading in a thread of this process would not do: /init's exec of
	// the real init waits for every thread, and one stuck in a module's init
	// never leaves.
	Isolate func(*coldplug.Candidate) bool
	// Timeout is the deadline of an isolated load; <= 0 means DefaultTimeout.
	Timeout time.Duration
	// Nice is the scheduling priority (nice value, -20 to 19) an isolated
	// load runs at; 0 leaves it at this process's. A negative one lets a
	// driver set's init, started early, run ahead of the kernel's own
	// modules loading beside it (/init uses DriverNice).
	Nice int
	// FirmwareDirs, when set, are where the kernel's firmware loader looks
	// (/lib/firmware, ...): a driver-set module's (Isolate) declared firmware
	// missing from all of them is recorded in its entry (MissingFirmware)
	// before it loads; the load goes ahead, the kernel decides.
	FirmwareDirs []string

	mu      sync.Mutex
	refused map[string]bool // files already reported as refused
	// decomp is the module format the kernel decompresses itself, read
	// once from sysfs (kernelDecompresses).
	decompOnce sync.Once
	decomp     string
}

// DefaultTimeout is how long an isolated module load may take before /init
// goes on without it (kpreload.load_timeout= overrides it). A GPU driver's
// init, firmware included, takes seconds; a minute means it is not coming.
const DefaultTimeout = 60 * time.Second

// DriverNice is the nice value /init gives isolated (driver-set) loads by
// default: the kernel then gives their module init about nine times the CPU
// share of a load at nice 0, such as the storage modules the first coldplug
// loads beside it. /init waits for both before it hands over, so the order
// moves the driver's bind earlier without moving the real init later.
const DriverNice = -10

// ResultLoading is the result of an isolated load still running at its deadline.
const ResultLoading = "still loading"

// errStillLoading is what an isolated load returns at its deadline.
var errStillLoading = errors.New("still loading")

type node struct {
	name string
	cand *coldplug.Candidate
	deps []*node
	// soft holds softdep pre modules: loaded first, but their failure does not
	// stop this module.
	soft []*node
	// softPre are the soft "pre:" dependencies as resolved in the index.
	softPre []string
	done    chan struct{}
	result  report.Module
	ok      bool // loaded, already loaded or built in
	// reported is true for a module whose every candidate was refused: each
	// refusal has its own entry, so the node adds none.
	reported bool
}

// Load loads the named modules and their dependencies from idx and returns one
// report entry per module considered, refusals included, sorted by start time.
// It never panics and never stops at the first failure: each module's outcome is
// independent except that a module whose dependency failed is not attempted.
func (l *Loader) Load(idx *coldplug.Index, names []string) []report.Module {
	if l.Kernel == nil {
		l.Kernel = System{}
	}
	if l.Now == nil {
		l.Now = func() float64 { return 0 }
	}
	if l.Params == nil {
		l.Params = func(string) string { return "" }
	}
	par := l.Parallel
	if par <= 0 {
		par = 4
	}
	var out []report.Module
	nodes := map[string]*node{}
	requested := map[string]bool{}
	roots := make([]string, len(names))
	for i, n := range names {
		roots[i] = modname.Normalize(n)
		requested[roots[i]] = true
	}
	// softs resolves soft dependencies as modprobe resolves its arguments: by
	// name, else by alias among the index's modules (ext4's "crypto-crc32c" is
	// crc32c_generic and crc32c_intel). They are best effort: one that cannot
	// be had is left out, and its failure stops nothing.
	softs := func(args []string) []string {
		var out []string
		for _, a := range args {
			found := idx.Lookup(a)
			if d := modname.Normalize(a); len(found) == 0 && l.present(d) {
				found = []string{d}
			}
			for _, d := range found {
				if !slices.Contains(out, d) {
					out = append(out, d)
				}
			}
		}
		return out
	}
	// resolve makes a module's node: already there, refused, missing, or the
	// candidate to insert; its dependencies (hard, then soft pre) are what
	// modorder walks next. A module is resolved once across walks.
	walkDeps := map[string][]string{}
	resolve := func(name string) []string {
		if nodes[name] != nil {
			return walkDeps[name]
		}
		n := &node{name: name, done: make(chan struct{})}
		nodes[name] = n
		if l.present(name) {
			n.ok = true
			n.result = l.entry(name, nil, "already loaded", "present in /sys/module (built in or loaded earlier)", "")
			close(n.done)
			return nil
		}
		cands := idx.ByName(name)
		var refusals []string
		for i := range cands {
			c := &cands[i]
			if why := l.check(c); why != "" {
				refusals = append(refusals, why)
				if l.markRefused(c.File) {
					out = append(out, l.entry(name, c, "refused", why, ""))
				}
				continue
			}
			if n.cand == nil {
				n.cand = c
			}
		}
		if n.cand == nil {
			if len(refusals) > 0 {
				// Each refusal has its own entry already; dependents see this reason.
				n.result = l.entry(name, nil, "refused", "every candidate refused: "+strings.Join(refusals, "; "), "")
				n.reported = true
			} else {
				n.result = l.entry(name, nil, "failed", "no module named "+name+" in the boot index", "")
			}
			close(n.done)
			return nil
		}
		var deps []string
		for _, d := range n.cand.Module.Depends {
			deps = append(deps, modname.Normalize(d))
		}
		n.softPre = softs(n.cand.Module.SoftPre)
		deps = append(deps, n.softPre...)
		walkDeps[name] = deps
		return deps
	}
	// An edge that closes a dependency cycle points to a failed stand-in, so
	// the modules on the cycle fail instead of waiting on each other forever;
	// the real node keeps its own outcome.
	cyclic := map[[2]string]*node{}
	onCycle := func(from, to string, path []string) {
		c := &node{name: to, done: make(chan struct{})}
		c.result = l.entry(to, nil, "failed", "dependency cycle: "+strings.Join(path, " -> "), "")
		close(c.done)
		cyclic[[2]string{from, to}] = c
	}
	dep := func(from, to string) *node {
		if c, ok := cyclic[[2]string{from, to}]; ok {
			return c
		}
		return nodes[to]
	}
	var order []*node
	ordered := map[string]bool{}
	// after records, for a soft "post:" module new to this load, the modules
	// that asked for it: it loads once they are done.
	after := map[string][]string{}
	for walk := roots; len(walk) > 0; {
		var posts []string
		for _, name := range modorder.Walk(walk, resolve, onCycle) {
			n := nodes[name]
			if ordered[name] {
				continue
			}
			ordered[name] = true
			// A dependency that is already there is not news; a requested module is.
			if n.ok && n.cand == nil && !requested[name] || n.reported {
				continue
			}
			order = append(order, n)
			if n.cand == nil {
				continue
			}
			for _, d := range n.cand.Module.Depends {
				n.deps = append(n.deps, dep(name, modname.Normalize(d)))
			}
			for _, d := range n.softPre {
				if nodes[d] != nil {
					n.soft = append(n.soft, dep(name, d))
				}
			}
			for _, a := range after[name] {
				n.soft = append(n.soft, nodes[a])
			}
			for _, p := range softs(n.cand.Module.SoftPost) {
				if nodes[p] == nil && !slices.Contains(posts, p) {
					posts = append(posts, p)
				}
				if nodes[p] == nil {
					after[p] = append(after[p], name)
				}
			}
		}
		walk = posts
	}

	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for _, n := range order {
		if n.cand == nil {
			continue
		}
		wg.Add(1)
		go func(n *node) {
			defer wg.Done()
			defer close(n.done)
			for _, d := range n.deps {
				<-d.done
				if !d.ok {
					n.result = l.entry(n.name, n.cand, "failed", "dependency "+d.name+" did not load: "+d.result.Reason, "")
					return
				}
			}
			for _, d := range n.soft {
				<-d.done // order only: a failed soft dependency is recorded on its own
			}
			sem <- struct{}{}
			defer func() { <-sem }()
			n.result, n.ok = l.insert(n.cand)
		}(n)
	}
	wg.Wait()
	for _, n := range order {
		out = append(out, n.result)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

func (l *Loader) markRefused(file string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refused == nil {
		l.refused = map[string]bool{}
	}
	if l.refused[file] {
		return false
	}
	l.refused[file] = true
	return true
}

func (l *Loader) entry(name string, c *coldplug.Candidate, result, reason, errno string) report.Module {
	t := l.Now()
	m := report.Module{Name: name, Result: result, Reason: reason, Errno: errno, Start: t, End: t, Phase: l.Phase}
	if c != nil {
		m.Set, m.Path = c.Set.ID, c.File
	}
	return m
}

// present reports whether the module is built in or already loaded.
func (l *Loader) present(name string) bool {
	if l.SysRoot == "" {
		return false
	}
	_, err := os.Stat(filepath.Join(l.SysRoot, "module", name))
	return err == nil
}

// check returns why a candidate must not be loaded, or "".
func (l *Loader) check(c *coldplug.Candidate) string {
	if why := modinfo.CheckVermagic(c.Module.Vermagic, l.Release, l.Vermagic); why != "" {
		return why
	}
	if l.SigEnforced && c.Module.Unsigned {
		return "unsigned module, and the kernel enforces module signatures (module.sig_enforce=1 or lockdown): sign it (a recipe's signing: key) with a key the kernel trusts"
	}
	return ""
}

// moduleInitCompressedFile is MODULE_INIT_COMPRESSED_FILE from <linux/module.h>.
const moduleInitCompressedFile = 4

func (l *Loader) insert(c *coldplug.Candidate) (report.Module, bool) {
	name := modname.Normalize(c.Module.Name)
	m := l.entry(name, c, "", "", "")
	finish := func(result, reason string, err error) (report.Module, bool) {
		m.End = l.Now()
		m.Result, m.Reason = result, reason
		var errno unix.Errno
		if errors.As(err, &errno) {
			m.Errno = unix.ErrnoName(errno)
		}
		if err != nil && reason == "" {
			m.Reason = err.Error()
		}
		return m, result == "loaded" || result == "already loaded"
	}
	f, err := os.Open(c.File)
	if err != nil {
		return finish("failed", "", err) // err names the file
	}
	defer f.Close()
	if l.Isolate != nil && l.Isolate(c) {
		m.MissingFirmware = l.missingFirmware(c.Module.Firmware)
	}
	params := l.Params(name)
	if compressed := c.Module.Compression != "" && c.Module.Compression != "none"; compressed && !l.kernelDecompresses(c.Module.Compression) {
		// The kernel cannot decompress this format: read the file once,
		// check and decompress those bytes at once, and hand over the image.
		elf, enable, refusal, err := l.readChecked(f, c, &m)
		switch {
		case err != nil:
			return finish("failed", "", err)
		case refusal != "":
			return finish("refused", refusal, nil)
		}
		m.Decompress = "userspace"
		m.Called = l.Now()
		entry, ok := l.initImage(elf, params, c, finish)
		if enable && entry.Result != ResultLoading {
			entry.VerityStarted = l.verity().EnableVerity(int(f.Fd())) == nil
		}
		return entry, ok
	}
	enable := false
	if l.VerifyDigest {
		var refusal string
		if enable, refusal, err = l.verify(f, c, &m); err != nil {
			return finish("failed", "", err)
		} else if refusal != "" {
			return finish("refused", refusal, nil)
		}
	}
	flags := 0
	if c.Module.Compression != "" && c.Module.Compression != "none" {
		flags = moduleInitCompressedFile
	}
	m.Called = l.Now()
	if l.Isolate != nil && l.Isolate(c) {
		err = l.isolatedFinit(f, params, flags)
	} else {
		err = l.Kernel.FinitModule(int(f.Fd()), params, flags)
	}
	if enable && !errors.Is(err, errStillLoading) {
		// Its bytes matched: whatever the module's init said, the file
		// can take fs-verity now that the kernel is done reading it.
		m.VerityStarted = l.verity().EnableVerity(int(f.Fd())) == nil
	}
	if errors.Is(err, errStillLoading) {
		return finish(ResultLoading, fmt.Sprintf("its init had not returned after %s (kpreload.load_timeout); left to finish in the background while the boot goes on", l.timeout()), nil)
	}
	if flags != 0 {
		m.Decompress = "kernel"
	}
	if flags != 0 && (errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL)) {
		m.Decompress = "userspace"
		// The kernel cannot decompress this format itself: do it here, from
		// the file as opened and checked, not whatever its path names now.
		t := l.Now()
		elf, derr := decompressOpen(f, c.File)
		if derr != nil {
			return finish("failed", "", fmt.Errorf("decompress %s: %w", c.File, derr))
		}
		m.Called = l.Now()
		m.DecompressTime = m.Called - t
		return l.initImage(elf, params, c, finish)
	}
	return l.result(err, finish)
}

// initImage loads an uncompressed module image with init_module, in the
// forked child under the deadline when c is isolated, and finishes m.
func (l *Loader) initImage(elf []byte, params string, c *coldplug.Candidate, finish func(result, reason string, err error) (report.Module, bool)) (report.Module, bool) {
	var err error
	if l.Isolate != nil && l.Isolate(c) {
		err = l.isolatedInit(elf, params)
	} else {
		err = l.Kernel.InitModule(elf, params)
	}
	return l.result(err, finish)
}

// result finishes a module's entry by what its loading call returned.
func (l *Loader) result(err error, finish func(result, reason string, err error) (report.Module, bool)) (report.Module, bool) {
	switch {
	case errors.Is(err, errStillLoading):
		return finish(ResultLoading, fmt.Sprintf("its init had not returned after %s (kpreload.load_timeout); left to finish in the background while the boot goes on", l.timeout()), nil)
	case err == nil:
		return finish("loaded", "", nil)
	case errors.Is(err, unix.EEXIST):
		return finish("already loaded", "", err)
	default:
		return finish("failed", describe(err), err)
	}
}

// kernelDecompresses reports whether the running kernel decompresses modules
// stored as compression itself (finit_module's MODULE_INIT_COMPRESSED_FILE).
// A kernel built with CONFIG_MODULE_DECOMPRESS names the one format it takes
// in /sys/module/compression; a kernel without that file decompresses none.
// Without a SysRoot (tests) the kernel is asked, as before: finit_module
// first, userspace decompression when it refuses.
func (l *Loader) kernelDecompresses(compression string) bool {
	if l.SysRoot == "" {
		return true
	}
	l.decompOnce.Do(func() {
		b, err := os.ReadFile(filepath.Join(l.SysRoot, "module", "compression"))
		if err == nil {
			l.decomp = strings.TrimSpace(string(b))
		}
	})
	return l.decomp == compression
}

// readChecked reads the compressed module file f once and returns its
// decompressed image, or why it must not load: the bytes are hashed and
// decompressed side by side (two CPUs at boot), and the image is returned
// only when the digest is the index's (or the kernel measured the file's
// fs-verity digest as the index's). It records the read, digest and
// decompression times and the check in m, and returns whether the file may
// be given fs-verity once loaded, as verify does.
func (l *Loader) readChecked(f *os.File, c *coldplug.Candidate, m *report.Module) (elf []byte, enable bool, refusal string, err error) {
	hash := false
	if l.VerifyDigest {
		var merr error
		if refusal, merr = l.measure(f, c, m); refusal != "" {
			return nil, false, refusal, nil
		}
		hash = m.Verified == "" && c.Module.SHA256 != ""
		enable = hash && c.Module.Verity != "" && l.EnableVerity && errors.Is(merr, unix.ENODATA)
		// A file of another size than the index's is not the module:
		// refuse it before reading (a grown or endless file, up to the
		// limit, would be read and held in memory whole first).
		if st, err := f.Stat(); err == nil && hash && c.Module.Size > 0 && st.Size() != c.Module.Size {
			return nil, false, fmt.Sprintf("size mismatch: file has %d bytes, index says %d", st.Size(), c.Module.Size), nil
		}
	}
	t := l.Now()
	data, err := readAll(f, modinfo.MaxImageSize)
	m.ReadTime = l.Now() - t
	if err != nil {
		return nil, false, "", err // err names the file
	}
	if len(data) > modinfo.MaxImageSize {
		return nil, false, "", fmt.Errorf("%s: larger than %d bytes", c.File, modinfo.MaxImageSize)
	}
	var sum [sha256.Size]byte
	hashed := make(chan struct{})
	go func() {
		defer close(hashed)
		if hash {
			t := l.Now()
			sum = sha256.Sum256(data)
			m.DigestTime = l.Now() - t
		}
	}()
	t = l.Now()
	elf, _, derr := modinfo.Decompress(c.File, data)
	m.DecompressTime = l.Now() - t
	<-hashed
	if hash {
		if got := hex.EncodeToString(sum[:]); got != c.Module.SHA256 {
			return nil, false, fmt.Sprintf("digest mismatch: file sha256 %s, index says %s", got[:12], short(c.Module.SHA256)), nil
		}
		m.Verified = "sha256"
	}
	if derr != nil {
		return nil, false, "", fmt.Errorf("decompress %s: %w", c.File, derr)
	}
	return elf, enable, "", nil
}

// verify checks that f holds the bytes c's index entry names, the cheapest
// way it can: a file with fs-verity on whose digest, as the kernel measures
// it, is the one the entry records needs no reading here (the kernel checks
// every page read from then on against that digest's tree, so a changed
// byte fails the load with EIO); any other file is read through SHA-256.
// It records in m which check passed (Verified: "fs-verity", "sha256", or
// "" when the entry names no digest) and returns whether the file may be
// given fs-verity once the kernel has read it (the entry records a verity
// digest, the filesystem supports it and the file lacks it), and the
// refusal when the bytes are not the entry's.
func (l *Loader) verify(f *os.File, c *coldplug.Candidate, m *report.Module) (enable bool, refusal string, err error) {
	refusal, merr := l.measure(f, c, m)
	if refusal != "" || m.Verified != "" {
		return false, refusal, nil
	}
	// Another algorithm, no fs-verity, or the question failed: hash, and
	// turn fs-verity on afterwards where the file lacks it.
	enable = c.Module.Verity != "" && l.EnableVerity && errors.Is(merr, unix.ENODATA)
	if c.Module.SHA256 == "" {
		return false, "", nil
	}
	h := sha256.New()
	if err := l.timedDigest(h, f, m); err != nil {
		return false, "", err // err names the file
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != c.Module.SHA256 {
		return false, fmt.Sprintf("digest mismatch: file sha256 %s, index says %s", got[:12], short(c.Module.SHA256)), nil
	}
	// Hand the kernel the file as opened, not positioned at its end.
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return false, "", fmt.Errorf("rewind %s: %w", c.File, err)
	}
	m.Verified = "sha256"
	return enable, "", nil
}

// measure checks f by the kernel's measure of its fs-verity digest when the
// index records one and the file has fs-verity on: equal, it records
// Verified "fs-verity" in m; different, it returns the refusal. Otherwise
// (no digest recorded, no fs-verity, another algorithm) it records nothing,
// returning the measure's error, and the file is hashed.
func (l *Loader) measure(f *os.File, c *coldplug.Candidate, m *report.Module) (refusal string, err error) {
	want := c.Module.Verity
	if want == "" {
		return "", nil
	}
	got, err := l.verity().MeasureVerity(int(f.Fd()))
	switch {
	case err == nil && got == want:
		m.Verified = "fs-verity"
	case err == nil:
		return fmt.Sprintf("fs-verity digest mismatch: the kernel measures %s, index says %s", short(got), short(want)), nil
	}
	return "", err
}

// readAll reads f to its end into one buffer sized by its length, failing
// past max bytes (reported as len > max).
func readAll(f *os.File, max int) ([]byte, error) {
	size := 0
	if st, err := f.Stat(); err == nil && st.Size() > 0 {
		size = int(min(st.Size(), int64(max)+1))
	}
	buf := bytes.NewBuffer(make([]byte, 0, size+1))
	_, err := buf.ReadFrom(io.LimitReader(f, int64(max)+1))
	return buf.Bytes(), err
}

// short is the first 12 characters of a digest after its algorithm's name.
func short(d string) string {
	d = strings.TrimPrefix(d, fsverity.Prefix)
	return d[:min(12, len(d))]
}

func (l *Loader) verity() VerityKernel {
	if l.Verity == nil {
		return System{}
	}
	return l.Verity
}

// decompressOpen decompresses the open module file f (named name) from its
// start.
func decompressOpen(f *os.File, name string) ([]byte, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("rewind %s: %w", name, err)
	}
	data, err := io.ReadAll(io.LimitReader(f, modinfo.MaxImageSize))
	if err != nil {
		return nil, err // err names the file
	}
	elf, _, err := modinfo.Decompress(name, data)
	return elf, err
}

// timedDigest reads f into h, recording in m the seconds spent reading and
// hashing: the digest pass's two costs, apart.
func (l *Loader) timedDigest(h io.Writer, f io.Reader, m *report.Module) error {
	// 64 KiB a read: most modules are smaller, and a fresh megabyte for
	// each of the first coldplug's modules costs its zeroing under TCG.
	buf := make([]byte, 64<<10)
	for {
		t0 := l.Now()
		n, err := f.Read(buf)
		t1 := l.Now()
		h.Write(buf[:n])
		m.ReadTime += t1 - t0
		m.DigestTime += l.Now() - t1
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// missingFirmware lists the declared firmware files found in no FirmwareDirs.
func (l *Loader) missingFirmware(files []string) []string {
	if len(l.FirmwareDirs) == 0 {
		return nil
	}
	var missing []string
	for _, f := range files {
		found := false
		for _, d := range l.FirmwareDirs {
			if _, err := os.Stat(filepath.Join(d, f)); err == nil {
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, f)
		}
	}
	return missing
}

func (l *Loader) timeout() time.Duration {
	if l.Timeout <= 0 {
		return DefaultTimeout
	}
	return l.Timeout
}

// isolatedFinit runs finit_module in a forked child process (forkedFinit)
// and waits up to the deadline. When the fork itself fails, the module loads
// here, without a deadline, rather than not at all.
func (l *Loader) isolatedFinit(f *os.File, params string, flags int) error {
	err := forkedFinit(int(f.Fd()), params, flags, l.Nice, l.timeout())
	runtime.KeepAlive(f)
	if errors.Is(err, errForkFailed) {
		return l.Kernel.FinitModule(int(f.Fd()), params, flags)
	}
	return err
}

// isolatedInit is isolatedFinit for a module /init decompressed
// (init_module), under the same deadline.
func (l *Loader) isolatedInit(image []byte, params string) error {
	err := forkedInit(image, params, l.Nice, l.timeout())
	if errors.Is(err, errForkFailed) {
		return l.Kernel.InitModule(image, params)
	}
	return err
}

// describe explains the errors finit_module commonly returns.
func describe(err error) string {
	switch {
	case errors.Is(err, unix.ENOEXEC):
		return "kernel refused the module (ENOEXEC: wrong format or built for another kernel)"
	case errors.Is(err, unix.ENODEV):
		return "module initialised but found no device it supports (ENODEV)"
	case errors.Is(err, unix.ENOENT):
		return "module init failed with ENOENT (missing firmware or device)"
	case errors.Is(err, unix.EKEYREJECTED), errors.Is(err, unix.ENOKEY):
		return "module signature rejected by the kernel"
	case errors.Is(err, unix.EINVAL):
		return "kernel rejected the module (EINVAL: unknown symbols or bad parameters; see dmesg)"
	}
	return err.Error()
}
