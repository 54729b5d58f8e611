package install

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/report"
	"golang.org/x/sys/unix"
)

// pty opens a pseudo-terminal and returns its master and its terminal's
// path (/dev/pts/N): a real character device under /dev, as a serial port is.
func pty(t *testing.T) (*os.File, string) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	return master, fmt.Sprintf("/dev/pts/%d", n)
}

// readRecords reads what the terminal's writer wrote, for up to two
// seconds, from its master, and returns the up records in it.
func readRecords(t *testing.T, master *os.File) (booting, up *report.Up, line string) {
	t.Helper()
	got := make(chan []byte, 1)
	go func() {
		var b bytes.Buffer
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			b.Write(buf[:n])
			if err != nil || bytes.Contains(b.Bytes(), []byte("}\r\n")) {
				got <- b.Bytes()
				return
			}
		}
	}()
	select {
	case b := <-got:
		return report.ScanUp(b)
	case <-time.After(2 * time.Second):
		return nil, nil, ""
	}
}

// upRoot is a root as kpreload's units see it: /init's report naming
// channel, /proc's uptime and cmdline, and files.
func upRoot(t *testing.T, channel, cmdline string, files map[string]string) UpOptions {
	t.Helper()
	f := map[string]string{
		"run/kpreload/report.json": fmt.Sprintf(`{"format":1,"kernel":"k","channel":%q}`, channel),
		"proc/uptime":              "12.34 20.00\n", "proc/cmdline": cmdline + "\n",
	}
	for p, s := range files {
		f[p] = s
	}
	root := fakeRoot(t, f)
	return UpOptions{Root: root, Report: filepath.Join(root, "run/kpreload/report.json"), Proc: filepath.Join(root, "proc")}
}

// TestReportUp: kpreload kernel-hook up writes one up record on the
// terminal /init's report names, with the default target and the uptime,
// which ScanUp reads back; no channel, or no report, writes nothing and is
// no error; a channel that is not a device under /dev is refused.
func TestReportUp(t *testing.T) {
	master, tty := pty(t)
	o := upRoot(t, tty, "root=/dev/vda1 systemd.unit=rescue.target ro systemd.unit=multi-user.target",
		map[string]string{"etc/systemd/system/": ""})
	what, err := ReportUp(o)
	if err != nil {
		t.Fatal(err)
	}
	if want := "wrote on " + tty + ": kpreload-up.service reported the system up (multi-user.target)"; what != want {
		t.Errorf("ReportUp said %q, want %q", what, want)
	}
	_, up, line := readRecords(t, master)
	if up == nil || up.Target != "multi-user.target" || up.Time != 12.34 || up.Unit != report.UpUnit || !strings.HasPrefix(line, report.UpPrefix) {
		t.Errorf("the terminal got up record %+v (line %q), want multi-user.target at 12.34 s from %s", up, line, report.UpUnit)
	}

	for _, c := range []struct{ channel, says string }{
		{"", "/init used no report channel: nothing written"},
	} {
		if what, err := ReportUp(upRoot(t, c.channel, "", nil)); err != nil || what != c.says {
			t.Errorf("channel %q: %q, %v; want %q", c.channel, what, err, c.says)
		}
	}
	noReport := upRoot(t, tty, "", nil)
	noReport.Report = filepath.Join(t.TempDir(), "absent.json")
	if what, err := ReportUp(noReport); err != nil || !strings.Contains(what, "did not come through kpreload's /init") {
		t.Errorf("no report: %q, %v", what, err)
	}
	notDev := filepath.Join(t.TempDir(), "file")
	if _, err := ReportUp(upRoot(t, notDev, "", nil)); err == nil || !strings.Contains(err.Error(), "is not a device under /dev") {
		t.Errorf("channel %s: %v, want a refusal", notDev, err)
	}
	if _, err := ReportUp(upRoot(t, "/dev/../tmp/x", "", nil)); err == nil || !strings.Contains(err.Error(), "is not a device under /dev") {
		t.Errorf("channel /dev/../tmp/x: %v, want a refusal", err)
	}
	bad := upRoot(t, tty, "", nil)
	if err := os.WriteFile(bad.Report, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReportUp(bad); err == nil || !strings.Contains(err.Error(), "boot report") {
		t.Errorf("a damaged report: %v, want an error naming it", err)
	}
}

// TestReportUpStatus: with Status set, the machine's status goes on the
// channel as one status line just before the up record, which ScanStatus
// and ScanUp read back; a status that fails, or is more than one line, is
// left out and the up record is still written.
func TestReportUpStatus(t *testing.T) {
	for _, c := range []struct {
		name   string
		status func() ([]byte, error)
		want   string // ScanStatus's JSON, "" for none
		says   string
	}{
		{"one line", func() ([]byte, error) { return []byte(`{"booted":true}`), nil }, `{"booted":true}`, " after the machine's status"},
		{"failed", func() ([]byte, error) { return nil, fmt.Errorf("no root") }, "", " (no status line: no root)"},
		{"two lines", func() ([]byte, error) { return []byte("{\n}"), nil }, "", " (no status line: it is not one line)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			master, tty := pty(t)
			o := upRoot(t, tty, "systemd.unit=multi-user.target", nil)
			o.Status = c.status
			what, err := ReportUp(o)
			if err != nil || !strings.HasSuffix(what, "(multi-user.target)"+c.says) {
				t.Fatalf("ReportUp = %q, %v; want it to end %q", what, err, c.says)
			}
			got := make(chan []byte, 1)
			go func() {
				var b bytes.Buffer
				buf := make([]byte, 4096)
				for !bytes.Contains(b.Bytes(), []byte(report.UpPrefix)) || !bytes.HasSuffix(b.Bytes(), []byte("\n")) {
					n, err := master.Read(buf)
					b.Write(buf[:n])
					if err != nil {
						break
					}
				}
				got <- b.Bytes()
			}()
			var log []byte
			select {
			case log = <-got:
			case <-time.After(2 * time.Second):
				t.Fatal("nothing came on the terminal")
			}
			_, up, _ := report.ScanUp(log)
			status := string(report.ScanStatus(log))
			if up == nil || status != c.want {
				t.Errorf("the terminal got %q: up record %+v, status %q; want the up record and status %q", log, up, status, c.want)
			}
			if c.want != "" && bytes.Index(log, []byte(report.StatusPrefix)) > bytes.Index(log, []byte(report.UpPrefix)) {
				t.Errorf("the status line came after the up record: %q", log)
			}
		})
	}
}

// TestDefaultTarget: the command line's last systemd.unit= wins; else
// default.target's link, /etc's before /usr/lib's and /lib's.
func TestDefaultTarget(t *testing.T) {
	for _, c := range []struct {
		name, cmdline string
		links         map[string]string
		want          string
	}{
		{"command line", "quiet systemd.unit=rescue.target", map[string]string{"etc/systemd/system/default.target": "/lib/systemd/system/multi-user.target"}, "rescue.target"},
		{"/etc's link", "quiet", map[string]string{"etc/systemd/system/default.target": "/lib/systemd/system/multi-user.target", "lib/systemd/system/default.target": "graphical.target"}, "multi-user.target"},
		{"the distribution's", "quiet", map[string]string{"lib/systemd/system/default.target": "graphical.target"}, "graphical.target"},
		{"none", "", nil, "default.target"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := fakeRoot(t, map[string]string{"proc/cmdline": c.cmdline + "\n"})
			for p, target := range c.links {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(target, filepath.Join(root, p)); err != nil {
					t.Fatal(err)
				}
			}
			if got, err := DefaultTarget(root, filepath.Join(root, "proc")); err != nil || got != c.want {
				t.Errorf("DefaultTarget = %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

// TestBootOKAnnounces: boot-ok writes the booting record on the report
// channel where kpreload-up.service is enabled, and not where it is not.
func TestBootOKAnnounces(t *testing.T) {
	for _, enabled := range []bool{true, false} {
		t.Run(fmt.Sprintf("enabled %v", enabled), func(t *testing.T) {
			master, tty := pty(t)
			o := upRoot(t, tty, "", nil)
			if enabled {
				link := filepath.Join(o.Root, "etc/systemd/system/multi-user.target.wants", report.UpUnit)
				if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink("/"+UpUnit, link); err != nil {
					t.Fatal(err)
				}
			}
			done, err := BootOK(context.Background(), BootOKOptions{Root: o.Root, Report: o.Report, Proc: o.Proc, EFIVars: filepath.Join(o.Root, "efivars")})
			if err != nil {
				t.Fatal(err)
			}
			said := strings.Contains(strings.Join(done, "\n"), "kpreload-boot-ok.service reported the system booting")
			if !enabled {
				if said {
					t.Errorf("boot-ok said %q with kpreload-up.service not enabled", done)
				}
				return
			}
			booting, _, _ := readRecords(t, master)
			if !said || booting == nil || booting.Unit != "kpreload-boot-ok.service" || booting.Time != 12.34 {
				t.Errorf("boot-ok said %q, the terminal got %+v; want the booting record", done, booting)
			}
		})
	}
}
