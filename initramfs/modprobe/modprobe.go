// Package modprobe is the part of kpreload's /init that serves the kernel's
// own module requests before switch_root: request_module() runs the usermode
// helper /sbin/modprobe ("/sbin/modprobe -q -- crypto-crc32c"), which in a
// kpreload initramfs is a link to /init that /init makes when it starts
// (Install). This package makes that link, recognises the call, parses its
// arguments strictly, and keeps the record of each request that PID 1 adds
// to its boot report; resolving and loading the module is pid1's
// (Boot.Modprobe), through the same loader and settings as the boot's own loads.
package modprobe

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/kpreload/kpreload/internal/fileutil"
	"github.com/kpreload/kpreload/report"
)

// noFollow opens a record without following a link or waiting on a FIFO.
const noFollow = syscall.O_NOFOLLOW | syscall.O_NONBLOCK

// HelperPath is where the kernel runs its module helper (CONFIG_MODPROBE_PATH,
// /proc/sys/kernel/modprobe), relative to the initramfs root, and HelperTarget
// what the link there points to: /init.
//
// The archive does not carry the link: /init makes it when it starts
// (Install). The kernel runs its helper for its own requests before /init
// too, while its built-in code starts (on Debian's 6.1 cloud kernel the crypto
// API's look-ups of hmac(sha256), hmac(sha1) and cbc(aes), each also as
// NAME-all: six runs). No module of an initramfs serves those, their helper
// could neither log (no /dev/kmsg yet) nor leave a record /init would see (its
// /run was not mounted yet), and each run is a start of the Go binary: 0.31 s
// of the kernel's start under the boot benchmark's instruction clock, against
// a request the kernel answers at once without a helper.
const (
	HelperPath   = "sbin/modprobe"
	HelperTarget = "../init"
)

// Install makes the helper link, HelperPath to HelperTarget, under the
// initramfs root root: /init does so when it starts, before it loads or
// mounts anything that could make the kernel ask for a module. A link that
// is there already and points to HelperTarget (an initramfs whose archive
// carried it) is no error.
func Install(root string) error {
	p := filepath.Join(root, HelperPath)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("module helper: %w", err)
	}
	err := os.Symlink(HelperTarget, p)
	if errors.Is(err, fs.ErrExist) {
		if got, rerr := os.Readlink(p); rerr == nil && got == HelperTarget {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("module helper: %w", err)
	}
	return nil
}

// RecordDir is where helpers leave their records, relative to the run
// directory (/run): PID 1 reads them when it writes its report.
const RecordDir = "kpreload/modprobe"

// Bounds on what a helper takes and leaves.
const (
	// MaxArgs is the most arguments accepted (the kernel passes three).
	MaxArgs = 8
	// MaxNameLen is the longest name accepted: the kernel's requests fit
	// MODULE_NAME_LEN (56), modprobe's arguments PATH_MAX.
	MaxNameLen = 255
	// MaxRecords is the most records kept in RecordDir; a helper that finds
	// that many writes none (its line on /dev/kmsg still says what it did).
	MaxRecords = 64
	// MaxModules is the most module entries one record keeps.
	MaxModules = 16
	// MaxRecordSize is the largest record file read back.
	MaxRecordSize = 32 << 10
	// MaxLine is the longest line written to /dev/kmsg, newline included.
	MaxLine = 240
)

// Invoked reports whether a process started with args (argv) and process
// id pid is the kernel's module helper rather than the boot's /init: it runs
// as ".../modprobe" (the link) and is not process 1.
func Invoked(args []string, pid int) bool {
	return pid != 1 && len(args) > 0 && filepath.Base(args[0]) == "modprobe"
}

// Request is one call of the helper: the module or alias asked for.
type Request struct {
	// Name is the module name or alias ("crypto-crc32c", "fs-vfat", "nls_cp437").
	Name string
	// Quiet is -q: the kernel always passes it. The helper writes its one
	// line to /dev/kmsg either way, and nothing to its output.
	Quiet bool
}

// Parse parses the helper's arguments (without argv[0]) as the kernel passes
// them: options (-q, --quiet), "--", then exactly one name. Any other option,
// a second name (modprobe would take it as a module parameter, which the
// kernel never passes), a missing, empty or over-long name, or a name with
// spaces or control characters is an error saying which argument.
func Parse(args []string) (Request, error) {
	var r Request
	if len(args) > MaxArgs {
		return r, fmt.Errorf("modprobe: %d arguments, at most %d accepted (the kernel passes -q -- NAME)", len(args), MaxArgs)
	}
	named, options := false, true
	for i, a := range args {
		switch {
		case options && a == "--":
			options = false
		case options && (a == "-q" || a == "--quiet"):
			r.Quiet = true
		case options && strings.HasPrefix(a, "-"):
			return Request{}, fmt.Errorf("modprobe: argument %d: unknown option %s (kpreload's helper takes -q, --, NAME)", i+1, quote(a))
		case named:
			return Request{}, fmt.Errorf("modprobe: argument %d: unexpected %s after the name %s (one name, no module parameters)", i+1, quote(a), quote(r.Name))
		default:
			if err := checkName(a); err != nil {
				return Request{}, fmt.Errorf("modprobe: argument %d: %w", i+1, err)
			}
			r.Name, named = a, true
		}
	}
	if !named {
		return Request{}, errors.New("modprobe: no module name given (the kernel passes -q -- NAME)")
	}
	return r, nil
}

// checkName accepts a module name or alias: printable ASCII without spaces,
// at most MaxNameLen bytes ("crypto-cbc(aes)" has parentheses).
func checkName(name string) error {
	if name == "" {
		return errors.New("empty module name")
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("module name %s is %d bytes, longer than %d", quote(name), len(name), MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("module name %s: byte %d is %#02x, want printable ASCII without spaces", quote(name), i, c)
		}
	}
	return nil
}

// quote quotes s for a message, cut to 64 bytes.
func quote(s string) string {
	if len(s) > 64 {
		return fmt.Sprintf("%q...", s[:64])
	}
	return fmt.Sprintf("%q", s)
}

// Outcomes of a request.
const (
	// Loaded: a module the name resolved to loaded now.
	Loaded = "loaded"
	// Present: what the name resolved to was loaded or built in already.
	Present = "already present"
	// Failed: the name resolved to modules, none of which could be loaded.
	Failed = "failed"
	// NotFound: no module of the initramfs's boot index has that name or an
	// alias matching it, and no module of that name is present.
	NotFound = "not found"
	// TimedOut: the loads had not finished when the helper's time was up.
	TimedOut = "timed out"
)

// Record is what one helper did, as PID 1 reads it back for its report.
type Record struct {
	// Request is the name the kernel asked for.
	Request string `json:"request"`
	// Start and End are seconds since the kernel started.
	Start float64 `json:"start"`
	End   float64 `json:"end"`
	// Outcome is one of Loaded, Present, Failed, NotFound, TimedOut.
	Outcome string `json:"outcome"`
	// Reason says why, for an outcome other than Loaded or Present.
	Reason string `json:"reason,omitempty"`
	// Modules are the loader's entries (at most MaxModules).
	Modules []report.Module `json:"modules,omitempty"`
}

// OK reports whether the request was served: exit status 0.
func (r *Record) OK() bool { return r.Outcome == Loaded || r.Outcome == Present }

// Line is the record as one /dev/kmsg line, without a level prefix or
// newline, at most MaxLine-8 bytes: the name asked for and what became of it.
func (r *Record) Line() string {
	var loaded, present, bad []string
	for _, m := range r.Modules {
		switch m.Result {
		case "loaded":
			loaded = append(loaded, m.Name)
		case "already loaded":
			present = append(present, m.Name)
		default:
			what := m.Result
			if m.Errno != "" {
				what += " " + m.Errno
			}
			bad = append(bad, m.Name+" "+what)
		}
	}
	s := fmt.Sprintf("kpreload: the kernel requested %s: %s", r.Request, r.Outcome)
	if len(loaded) > 0 {
		s += "; loaded " + strings.Join(loaded, ", ")
	}
	if len(present) > 0 {
		s += "; already present " + strings.Join(present, ", ")
	}
	if len(bad) > 0 {
		s += "; " + strings.Join(bad, ", ")
	}
	if r.Reason != "" && !r.OK() {
		s += " (" + r.Reason + ")"
	}
	s += fmt.Sprintf(" [%.3fs]", r.End-r.Start)
	s = strings.Map(func(c rune) rune {
		if c < ' ' || c == 0x7f {
			return ' '
		}
		return c
	}, s)
	if max := MaxLine - 8; len(s) > max {
		s = s[:max-3] + "..."
	}
	return s
}

// WriteRecord stores r in dir (the run directory's RecordDir) under a name
// of its own, atomically (a temporary file renamed), so that PID 1 never
// reads half a record. It writes nothing when dir already holds MaxRecords.
func WriteRecord(dir string, r Record) error {
	if len(r.Modules) > MaxModules {
		r.Modules = r.Modules[:MaxModules]
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("modprobe record: %w", err)
	}
	names, err := recordFiles(dir)
	if err != nil {
		return err
	}
	if len(names) >= MaxRecords {
		return fmt.Errorf("modprobe record: %s already holds %d records: this one is not kept", dir, len(names))
	}
	data, err := json.Marshal(&r)
	if err != nil {
		return fmt.Errorf("modprobe record: %w", err)
	}
	if len(data) > MaxRecordSize {
		return fmt.Errorf("modprobe record: %d bytes, more than %d", len(data), MaxRecordSize)
	}
	if _, err := fileutil.WriteNew(dir, "request-*.json", data, 0o600, true); err != nil {
		return fmt.Errorf("modprobe record: %w", err)
	}
	return nil
}

// recordFiles returns the record files in dir (*.json), sorted; a dir that
// does not exist holds none.
func recordFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("modprobe records: %w", err)
	}
	var names []string
	for _, e := range ents {
		if n := e.Name(); e.Type().IsRegular() && strings.HasSuffix(n, ".json") && !strings.HasPrefix(n, ".") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names, nil
}

// ReadRecords reads the records in dir, at most MaxRecords of at most
// MaxRecordSize bytes each, sorted by start time. A file that cannot be read
// or decoded is skipped with an error naming it; the others are returned.
func ReadRecords(dir string) ([]Record, []error) {
	names, err := recordFiles(dir)
	if err != nil {
		return nil, []error{err}
	}
	var errs []error
	if len(names) > MaxRecords {
		errs = append(errs, fmt.Errorf("modprobe records: %s holds %d, only the first %d are read", dir, len(names), MaxRecords))
		names = names[:MaxRecords]
	}
	var out []Record
	for _, n := range names {
		r, err := readRecord(filepath.Join(dir, n))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, r)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out, errs
}

// readRecord reads one record file, refusing anything but a regular file
// (opened without following a link, without blocking) of at most MaxRecordSize bytes.
func readRecord(path string) (Record, error) {
	var r Record
	f, err := os.OpenFile(path, os.O_RDONLY|noFollow, 0)
	if err != nil {
		return r, fmt.Errorf("modprobe record: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return r, fmt.Errorf("modprobe record: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return r, fmt.Errorf("modprobe record %s: not a regular file", path)
	}
	if fi.Size() > MaxRecordSize {
		return r, fmt.Errorf("modprobe record %s: %d bytes, more than %d", path, fi.Size(), MaxRecordSize)
	}
	data := make([]byte, fi.Size())
	if _, err := f.ReadAt(data, 0); err != nil {
		return r, fmt.Errorf("modprobe record: %w", err)
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("modprobe record %s: %w", path, err)
	}
	if len(r.Modules) > MaxModules {
		r.Modules = r.Modules[:MaxModules]
	}
	if err := checkName(r.Request); err != nil {
		return Record{}, fmt.Errorf("modprobe record %s: request: %w", path, err)
	}
	return r, nil
}
