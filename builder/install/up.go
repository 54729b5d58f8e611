package install

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/report"
	"golang.org/x/sys/unix"
)

// UpUnit runs `kpreload kernel-hook up` once the system has reached its
// default target: it writes the report.UpUp record on /init's report channel.
const UpUnit = "usr/lib/systemd/system/" + report.UpUnit

// UpOptions are what ReportUp and BootOK's announcement read.
type UpOptions struct {
	// Root is the running system's root ("/").
	Root string
	// Report is /init's boot report (report.Path), which names the channel.
	Report string
	// Proc is where procfs is mounted ("/proc"): its uptime and cmdline.
	Proc string
	// Status, if set, gives the machine's status as one line of JSON
	// (kpreload status --json); ReportUp writes it on the channel as a
	// report.StatusPrefix line just before the up record. A status that
	// cannot be had is left out: the up record is written all the same.
	Status func() ([]byte, error)
}

func (o UpOptions) withDefaults() UpOptions {
	if o.Root == "" {
		o.Root = "/"
	}
	if o.Report == "" {
		o.Report = report.Path
	}
	if o.Proc == "" {
		o.Proc = "/proc"
	}
	return o
}

// ReportUp writes the report.UpUp record, from kpreload-up.service, on the
// report channel /init's report names; the record names the target the
// system came up to (DefaultTarget). It returns what it did, in words. A
// boot with no report (not through kpreload's /init) or no channel is not an
// error: there is no one to tell.
func ReportUp(o UpOptions) (string, error) {
	o = o.withDefaults()
	target, err := DefaultTarget(o.Root, o.Proc)
	if err != nil {
		return "", err
	}
	return writeUp(o, report.Up{State: report.UpUp, Unit: report.UpUnit, Target: target}, o.Status)
}

// announceBooting writes the report.UpBooting record, from
// kpreload-boot-ok.service, where kpreload-up.service is enabled: a harness
// that sees it waits for that unit's record rather than for the console.
func announceBooting(o UpOptions) (string, error) {
	o = o.withDefaults()
	if !upEnabled(o.Root) {
		return "", nil
	}
	return writeUp(o, report.Up{State: report.UpBooting, Unit: "kpreload-boot-ok.service"}, nil)
}

// upEnabled reports whether kpreload-up.service is wanted by a target in
// root (systemctl enable or preset makes the link).
func upEnabled(root string) bool {
	for _, dir := range []string{"etc/systemd/system", "usr/lib/systemd/system", "lib/systemd/system"} {
		for _, target := range []string{"multi-user.target", "graphical.target", "default.target"} {
			if _, err := inroot.Lstat(root, path.Join(dir, target+".wants", report.UpUnit)); err == nil {
				return true
			}
		}
	}
	return false
}

// writeUp stamps rec with the format and the uptime and writes it on the
// report's channel, after the status line status gives (when not nil).
func writeUp(o UpOptions, rec report.Up, status func() ([]byte, error)) (string, error) {
	b, err := inroot.ReadPath(o.Report, 64<<20)
	if errors.Is(err, fs.ErrNotExist) {
		return "this boot did not come through kpreload's /init: no report channel to write on", nil
	}
	if err != nil {
		return "", fmt.Errorf("boot report: %w", err)
	}
	var rep struct {
		Channel string `json:"channel"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return "", fmt.Errorf("boot report %s: %w", o.Report, err)
	}
	if rep.Channel == "" {
		return "/init used no report channel: nothing written", nil
	}
	if !filepath.IsAbs(rep.Channel) || !strings.HasPrefix(filepath.Clean(rep.Channel), "/dev/") {
		return "", fmt.Errorf("boot report %s: channel %q is not a device under /dev", o.Report, rep.Channel)
	}
	rec.Format = report.UpFormat
	rec.Time, err = uptime(o.Proc)
	if err != nil {
		return "", err
	}
	line, err := rec.Line()
	if err != nil {
		return "", err
	}
	said := ""
	if status != nil {
		b, serr := status()
		switch {
		case serr != nil:
			said = fmt.Sprintf(" (no status line: %v)", serr)
		case bytes.ContainsAny(b, "\r\n"):
			said = " (no status line: it is not one line)"
		default:
			line = report.StatusPrefix + string(b) + "\n" + line
			said = " after the machine's status"
		}
	}
	// O_NOCTTY: a serial port must not become this process's terminal;
	// O_NONBLOCK: nor may its open wait for a carrier.
	f, err := os.OpenFile(rep.Channel, os.O_WRONLY|os.O_APPEND|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
	if err != nil {
		return "", fmt.Errorf("report channel: %w", err)
	}
	if _, err := fmt.Fprintln(f, line); err != nil {
		f.Close()
		return "", fmt.Errorf("report channel %s: %w", rep.Channel, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("report channel %s: %w", rep.Channel, err)
	}
	return fmt.Sprintf("wrote on %s: %s%s", rep.Channel, rec.Describe(), said), nil
}

// uptime reads the first field of proc's uptime, seconds since boot.
func uptime(proc string) (float64, error) {
	b, err := os.ReadFile(filepath.Join(proc, "uptime"))
	if err != nil {
		return 0, fmt.Errorf("uptime: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("uptime: %s is empty", filepath.Join(proc, "uptime"))
	}
	t, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, fmt.Errorf("uptime: %w", err)
	}
	return t, nil
}

// DefaultTarget returns the target systemd boots root to: the kernel
// command line's systemd.unit= (proc's cmdline; the last one wins, as in
// systemd), else the unit default.target links to in /etc, /usr/lib or
// /lib, else "default.target".
func DefaultTarget(root, proc string) (string, error) {
	if b, err := os.ReadFile(filepath.Join(proc, "cmdline")); err == nil {
		unit := ""
		for _, f := range strings.Fields(string(b)) {
			if v, ok := strings.CutPrefix(f, "systemd.unit="); ok && v != "" {
				unit = v
			}
		}
		if unit != "" {
			return unit, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("kernel command line: %w", err)
	}
	for _, dir := range []string{"etc/systemd/system", "usr/lib/systemd/system", "lib/systemd/system"} {
		target, err := inroot.Readlink(root, path.Join(dir, "default.target"))
		if err == nil && target != "" {
			return path.Base(target), nil
		}
	}
	return "default.target", nil
}
