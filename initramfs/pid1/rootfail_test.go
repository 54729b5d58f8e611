package pid1

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// kmsgRecords are /dev/kmsg's records as the kernel gives them (priority,
// sequence, time, flags; message; continuation lines) around a failed ext4
// mount of the fixture's root.
const kmsgRecords = "6,501,2900000,-;virtio_blk virtio1: [vda] 4194304 512-byte logical blocks\n" +
	" SUBSYSTEM=virtio\n" +
	"3,502,3100000,-;EXT4-fs (vda2): Cannot load crc32c driver.\n" +
	"6,503,3100100,-;random: crng init done\n" +
	"3,504,3200000,-;EXT4-fs (vda2): Cannot load crc32c driver.\n"

// TestRootCannotMount: a root device that is there but whose mount keeps
// failing is a fault after kpreload.rootfail= seconds: the report says why,
// which module the filesystem lacked and what the kernel said, and /init
// reboots into the boot loader's fallback entry only when kpreload.fallback=1
// says one was arranged. A root device that is not there is waited for, a
// fallback or not.
func TestRootCannotMount(t *testing.T) {
	type want struct {
		reboots      int
		fallback     string   // the report's root.fallback ("" for no report of a failure)
		failedMods   []string // substrings, in order
		kernelLog    []string
		console      []string
		notConsole   []string
		warnings     []string
		mountedOrNot bool // the root was mounted in the end
	}
	tests := []struct {
		name  string
		setup func(f *fixture)
		want  want
	}{{
		name: "ext4's dependency fails to load, a fallback entry: reboot after kpreload.rootfail",
		setup: func(f *fixture) {
			f.cmdline = "kpreload.rootfail=6 kpreload.fallback=1"
			f.sys.mountErrs = 1 << 30
			f.kern.errs["jbd2"] = unix.ENOEXEC
			f.write("dev/kmsg", kmsgRecords)
		},
		want: want{
			reboots: 1, fallback: "reboot",
			failedMods: []string{"ext4 (fs-ext4): failed: dependency jbd2 did not load", "jbd2 (needed by ext4): failed: kernel refused the module (ENOEXEC"},
			kernelLog:  []string{"EXT4-fs (vda2): Cannot load crc32c driver.", "EXT4-fs (vda2): Cannot load crc32c driver."},
			console: []string{
				"kpreload: error: root ",
				"is there but could not be mounted for 6s",
				"jbd2 (needed by ext4): failed",
				"the kernel said: EXT4-fs (vda2): Cannot load crc32c driver.",
				"kpreload: rebooting into the boot loader's fallback entry",
			},
		},
	}, {
		name: "no module for the filesystem in the initramfs, a fallback entry: reboot",
		setup: func(f *fixture) {
			f.cmdline = "rootfstype=xfs kpreload.rootfail=4 kpreload.fallback=1"
			f.sys.mountErrs = 1 << 30
		},
		want: want{
			reboots: 1, fallback: "reboot",
			failedMods: []string{"fs-xfs: no module in the initramfs provides it (build it with --filesystems xfs)"},
			console:    []string{"kpreload: rebooting into the boot loader's fallback entry"},
		},
	}, {
		name: "the mount fails, no fallback entry arranged: the report once, then today's retries",
		setup: func(f *fixture) {
			f.sys.mountErrs = 1 << 30
			f.sys.sleepLimit = 50e9 // past the default 30 s
			f.write("dev/kmsg", kmsgRecords)
		},
		want: want{
			fallback:   "none",
			kernelLog:  []string{"EXT4-fs (vda2): Cannot load crc32c driver.", "EXT4-fs (vda2): Cannot load crc32c driver."},
			console:    []string{"is there but could not be mounted for 30s", "kpreload: no fallback boot entry was arranged (kpreload.fallback=1 is not on the command line): retrying the mount", "kpreload: cannot mount root: mount "},
			notConsole: []string{"rebooting"},
		},
	}, {
		name: "the reboot fails: said, and the mount is retried",
		setup: func(f *fixture) {
			f.cmdline = "kpreload.rootfail=2 kpreload.fallback=1"
			f.sys.mountErrs = 1 << 30
			f.sys.rebootErr = unix.EPERM
			f.sys.sleepLimit = 10e9
		},
		want: want{
			reboots: 1, fallback: "reboot",
			console: []string{"kpreload: error: reboot: operation not permitted; retrying the mount"},
		},
	}, {
		name: "the mount fails for less than kpreload.rootfail: mounted, no fault",
		setup: func(f *fixture) {
			f.cmdline = "kpreload.rootfail=10 kpreload.fallback=1"
			f.sys.mountErrs = 3
		},
		want: want{mountedOrNot: true, console: []string{"kpreload: cannot mount root: "}, notConsole: []string{"could not be mounted", "rebooting"}},
	}, {
		name: "a bad kpreload.rootfail: a warning and the default",
		setup: func(f *fixture) {
			f.cmdline = "kpreload.rootfail=soon kpreload.fallback=1"
			f.sys.mountErrs = 1 << 30
			f.sys.sleepLimit = 60e9
		},
		want: want{
			reboots: 1, fallback: "reboot",
			console:  []string{"could not be mounted for 30s"},
			warnings: []string{`kpreload.rootfail="soon": want seconds between 0 and 3600; using 30s`},
		},
	}, {
		name: "the root device never appears, a fallback entry: keeps waiting, no reboot",
		setup: func(f *fixture) {
			f.cmdline = "kpreload.rootfail=1 kpreload.fallback=1"
			f.sys.roots = nil
			f.sys.sleepLimit = 40e9
		},
		want: want{
			console:    []string{"kpreload: waiting for root UUID=" + rootUUID + " (35s so far)"},
			notConsole: []string{"could not be mounted", "rebooting"},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, "")
			tt.setup(f)
			o := f.boot()
			if got := o.sys.reboots; got != tt.want.reboots {
				t.Errorf("%d reboots, want %d; console:\n%s", got, tt.want.reboots, o.console)
			}
			if tt.want.mountedOrNot != (len(o.sys.switched) == 1) {
				t.Errorf("switch_root %q, want it called: %v", o.sys.switched, tt.want.mountedOrNot)
			}
			for _, c := range tt.want.console {
				if !strings.Contains(o.console, c) {
					t.Errorf("console lacks %q:\n%s", c, o.console)
				}
			}
			for _, c := range tt.want.notConsole {
				if strings.Contains(o.console, c) {
					t.Errorf("console has %q:\n%s", c, o.console)
				}
			}
			if tt.want.fallback == "" {
				if o.written != nil && o.written.Root.Failed != "" {
					t.Errorf("report root %+v: want no failure", o.written.Root)
				}
				return
			}
			if o.written == nil {
				t.Fatalf("no report written; console:\n%s", o.console)
			}
			r := o.written.Root
			if r.Fallback != tt.want.fallback || !strings.Contains(r.Failed, "is there but could not be mounted") || r.Device != f.path("dev/vda2") {
				t.Errorf("report root %+v: want fallback %q and why", r, tt.want.fallback)
			}
			if got := r.FailedModules; len(got) != len(tt.want.failedMods) || !slices.EqualFunc(got, tt.want.failedMods, strings.Contains) {
				t.Errorf("failed modules %q, want %q", got, tt.want.failedMods)
			}
			if got := r.KernelLog; !slices.Equal(got, tt.want.kernelLog) {
				t.Errorf("kernel log %q, want %q", got, tt.want.kernelLog)
			}
			if !slices.ContainsFunc(o.written.Errors, func(e string) bool { return strings.Contains(e, r.Failed) }) {
				t.Errorf("report errors %q lack %q", o.written.Errors, r.Failed)
			}
			if got := unexpected(o.written.Warnings, tt.want.warnings); len(got) > 0 || len(o.written.Warnings) != len(tt.want.warnings) {
				t.Errorf("warnings %q, want %q", o.written.Warnings, tt.want.warnings)
			}
		})
	}
}

// TestKernelComplaints reads the kernel's log the way /init does: only
// lines naming the device or the filesystem, the last few, each bounded.
func TestKernelComplaints(t *testing.T) {
	long := "3,9,1,-;EXT4-fs (vda2): " + strings.Repeat("x", 400) + "\n"
	many := strings.Repeat("3,10,1,-;EXT4-fs (vda2): again\n", 10)
	tests := []struct {
		name, log, dev, fstype string
		want                   []string
	}{
		{"kmsg records", kmsgRecords, "vda2", "ext4", []string{"EXT4-fs (vda2): Cannot load crc32c driver.", "EXT4-fs (vda2): Cannot load crc32c driver."}},
		{"the device's name alone, not a longer one", "4,1,1,-;blk_update_request: I/O error, dev vda2, sector 0\n4,2,1,-;I/O error, dev vda21\n", "vda2", "xfs", []string{"blk_update_request: I/O error, dev vda2, sector 0"}},
		{"a long line is cut", long, "vda2", "ext4", []string{"EXT4-fs (vda2): " + strings.Repeat("x", kmsgMaxLine-len("EXT4-fs (vda2): ")) + "…"}},
		{"only the last lines", many, "vda2", "ext4", slices.Repeat([]string{"EXT4-fs (vda2): again"}, kmsgMaxLines)},
		{"nothing relevant", "6,1,1,-;random: crng init done\n", "vda2", "ext4", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, "")
			f.write("dev/kmsg", tt.log)
			if got := kernelComplaints(f.path("dev/kmsg"), tt.dev, tt.fstype); !slices.Equal(got, tt.want) {
				t.Errorf("kernelComplaints = %q, want %q", got, tt.want)
			}
		})
	}
	if got := kernelComplaints("/nonexistent/kmsg", "vda", "ext4"); got != nil {
		t.Errorf("an unreadable log gives %q, want nothing", got)
	}
}

// TestKernelComplaintsDoNotWait: /dev/kmsg has no end of file; at its end a
// read says EAGAIN, and /init must not wait there for the next record. A
// FIFO whose writer stays open behaves the same.
func TestKernelComplaintsDoNotWait(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "kmsg")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(fifo, os.O_RDWR, 0) // a writer that never closes
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteString(kmsgRecords); err != nil {
		t.Fatal(err)
	}
	got := make(chan []string, 1)
	go func() { got <- kernelComplaints(fifo, "vda2", "ext4") }()
	select {
	case lines := <-got:
		if len(lines) != 2 {
			t.Errorf("kernelComplaints = %q, want the two ext4 lines", lines)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("kernelComplaints waited at the end of the log")
	}
}
