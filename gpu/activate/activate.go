// Package activate publishes which driver is active once its modules are loaded:
// the /run/kpreload/driver link to that version's userspace (the libraries the
// image's ld.so.conf.d entry finds through it) and the /run/kpreload/ready record
// that kpreload-drivers.target waits for.
package activate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/kpreload/kpreload/internal/fileutil"
	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/kmodcache/names"
)

// DriversDir is where images keep each driver version's userspace, unpacked from
// its packages (<DriversDir>/<version>/usr/lib/...), as seen from the booted root.
const DriversDir = "/opt/kpreload/drivers"

// RunDir is where the records live at run time; /init writes them under its own
// /run, which switch_root carries over.
const RunDir = "/run"

// LinkName and ReadyName are the link and the readiness record under <runDir>/kpreload.
const (
	LinkName  = "driver"
	ReadyName = "ready"
)

// ErrNoUserspace is returned by Point when the version has no userspace directory.
var ErrNoUserspace = errors.New("no userspace directory for this driver version")

// LinkPath returns <runDir>/kpreload/driver.
func LinkPath(runDir string) string { return filepath.Join(runDir, "kpreload", LinkName) }

// ReadyPath returns <runDir>/kpreload/ready.
func ReadyPath(runDir string) string { return filepath.Join(runDir, "kpreload", ReadyName) }

// Point makes <runDir>/kpreload/driver a symlink to <driversDir>/<version>,
// replacing any previous link atomically (a reader sees the old target or the new
// one, never none). driversDir is the path as seen from the booted root; root is
// where that root is mounted now ("/" on a running system, "/newroot" in /init),
// under which the version directory must exist. When it does not, the link is
// removed (a stale link would hand out another version's libraries) and the error
// wraps ErrNoUserspace.
func Point(runDir, root, driversDir, version string) error {
	if err := names.Check("driver version", version); err != nil {
		return fmt.Errorf("activate: %w", err)
	}
	target := filepath.Join(driversDir, version)
	link := LinkPath(runDir)
	fi, err := os.Stat(filepath.Join(root, target))
	if err != nil || !fi.IsDir() {
		if rerr := Unpoint(runDir); rerr != nil {
			return rerr
		}
		if err == nil {
			err = fmt.Errorf("%s is not a directory", target)
		}
		return fmt.Errorf("activate: driver %s: %w (%v)", version, ErrNoUserspace, err)
	}
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return fmt.Errorf("activate: %w", err)
	}
	if err := fileutil.Symlink(target, link); err != nil {
		return fmt.Errorf("activate: %w", err)
	}
	return nil
}

// Unpoint removes the driver link if it exists.
func Unpoint(runDir string) error {
	if err := os.Remove(LinkPath(runDir)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("activate: %w", err)
	}
	return nil
}

// Target returns where the driver link points, or "" when there is none; the
// link is looked up inside runDir (TargetIn(runDir, "/")).
func Target(runDir string) (string, error) {
	return TargetIn(runDir, "/")
}

// TargetIn returns where the driver link <runDir>/kpreload/driver of the
// system at root points (runDir is a path inside root, the directories on the
// way resolved inside it), or "" when there is none.
func TargetIn(root, runDir string) (string, error) {
	t, err := inroot.Readlink(root, LinkPath(runDir))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("activate: %w", err)
	}
	return t, nil
}

// ReadyFormat is the current format of the Ready record.
const ReadyFormat = 1

// Ready is the record of the active driver, written once its modules are loaded
// and bound and its device nodes made. Schedulers and kpreload-drivers.target wait
// for the file; kpreload switch rewrites it.
type Ready struct {
	Format int `json:"format"`
	// Driver, Version and Flavor name the active driver ("nvidia", "535.261.03", "open").
	Driver  string `json:"driver"`
	Version string `json:"version"`
	Flavor  string `json:"flavor,omitempty"`
	// Set is the boot index set ID the modules came from.
	Set string `json:"set,omitempty"`
	// Kernel is the kernel release the modules were loaded into.
	Kernel string `json:"kernel,omitempty"`
	// Time is when the driver became ready, in seconds since the kernel started.
	Time float64 `json:"time"`
	// Modules lists the set's modules that are loaded, in load order.
	Modules []string `json:"modules"`
	// Userspace is where the driver link points ("" when the version has no userspace).
	Userspace string `json:"userspace,omitempty"`
	// DeviceNodes lists the device nodes made for it.
	DeviceNodes []string `json:"device_nodes,omitempty"`
	// By says who activated it: "init" at boot, "switch" for kpreload switch.
	By string `json:"by"`
	// Previous is the version that was active before a switch.
	Previous string `json:"previous,omitempty"`
}

// MarkReady writes r to <runDir>/kpreload/ready atomically (fileutil.WriteAtomic:
// temporary file, sync, rename, directory sync), so a reader never sees half a record.
func MarkReady(runDir string, r Ready) error {
	if r.Format == 0 {
		r.Format = ReadyFormat
	}
	if r.Modules == nil {
		r.Modules = []string{}
	}
	if err := r.checkNames(); err != nil {
		return fmt.Errorf("ready record: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("ready record: %w", err)
	}
	path := ReadyPath(runDir)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("ready record: %w", err)
	}
	if err := fileutil.WriteAtomic(path, append(b, '\n'), 0o644, true); err != nil {
		return fmt.Errorf("ready record: %w", err)
	}
	return nil
}

// ReadReady reads <runDir>/kpreload/ready, resolved inside runDir
// (ReadReadyIn(runDir, "/")); the error wraps fs.ErrNotExist when no driver has
// been marked ready.
func ReadReady(runDir string) (*Ready, error) {
	return ReadReadyIn(runDir, "/")
}

// ReadReadyIn reads <runDir>/kpreload/ready of the system at root (runDir is a
// path inside root): the path is resolved inside root, the record must be a
// regular file of at most inroot.MaxText bytes. The error names the file and
// wraps fs.ErrNotExist when no driver has been marked ready.
func ReadReadyIn(root, runDir string) (*Ready, error) {
	b, err := inroot.ReadFile(root, ReadyPath(runDir), inroot.MaxText)
	if err != nil {
		return nil, fmt.Errorf("ready record: %w", err)
	}
	return parseReady(b, filepath.Join(root, ReadyPath(runDir)))
}

// parseReady decodes a ready record read from file.
func parseReady(b []byte, file string) (*Ready, error) {
	var r Ready
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("ready record %s: %w", file, err)
	}
	if r.Format != ReadyFormat {
		return nil, fmt.Errorf("ready record %s: format %d, want %d", file, r.Format, ReadyFormat)
	}
	if err := r.checkNames(); err != nil {
		return nil, fmt.Errorf("ready record %s: %w", file, err)
	}
	return &r, nil
}

// checkNames refuses a record whose driver, version, flavour, kernel,
// previous version or set id is not a name (kmodcache/names): readers make
// paths of them (the driver's userspace and firmware directories, mounted
// into containers) and print them; the set id is held to the grammar the
// boot index holds it to.
func (r *Ready) checkNames() error {
	var errs []error
	for _, f := range []struct {
		field, v string
		optional bool
	}{
		{"driver", r.Driver, false}, {"version", r.Version, false}, {"flavor", r.Flavor, true},
		{"kernel", r.Kernel, true}, {"previous", r.Previous, true}, {"set", r.Set, true},
	} {
		check := names.Check
		if f.optional {
			check = names.CheckOptional
		}
		if err := check(f.field, f.v); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ClearReady removes the readiness record (while drivers are being swapped).
func ClearReady(runDir string) error {
	if err := os.Remove(ReadyPath(runDir)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("ready record: %w", err)
	}
	return nil
}
