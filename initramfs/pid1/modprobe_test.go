package pid1

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/initramfs/modprobe"
	"github.com/kpreload/kpreload/live/loader"
)

// helper runs /init as the kernel's module helper on the fixture with args
// and returns its exit status and the lines it wrote to /dev/kmsg.
func (f *fixture) helper(args ...string) (int, string) {
	f.t.Helper()
	f.write("proc/cmdline", strings.TrimSpace("root=UUID="+rootUUID+" "+f.cmdline)+"\n")
	kmsgPath := f.path("dev/kmsg")
	if _, err := os.Stat(kmsgPath); err != nil {
		f.write("dev/kmsg", "")
	}
	before, _ := os.ReadFile(kmsgPath)
	code := Modprobe(f.options(), args)
	after, err := os.ReadFile(kmsgPath)
	if err != nil {
		f.t.Fatal(err)
	}
	return code, string(after[len(before):])
}

// records returns the helper's records in the fixture's run directory as
// "request outcome: module result phase, ...".
func (f *fixture) records() []string {
	f.t.Helper()
	recs, errs := modprobe.ReadRecords(f.path("run/" + modprobe.RecordDir))
	if len(errs) > 0 {
		f.t.Fatalf("records: %v", errs)
	}
	var out []string
	for _, r := range recs {
		var mods []string
		for _, m := range r.Modules {
			mods = append(mods, m.Name+" "+m.Result+" "+m.Phase)
		}
		out = append(out, r.Request+" "+r.Outcome+": "+strings.Join(mods, ", "))
	}
	return out
}

// TestModprobe runs /init as the kernel's module helper (request_module's
// "/sbin/modprobe -q -- NAME") on the fixture's initramfs: names resolve as
// modprobe resolves them, load with their dependencies through the boot's
// loader and its checks, and each request leaves one line on /dev/kmsg and
// one record for the report.
func TestModprobe(t *testing.T) {
	for _, c := range []struct {
		name string
		// setup changes the fixture before its files are written, corrupt
		// after (a module file that no longer matches the index).
		setup, corrupt func(f *fixture)
		args           []string
		code           int
		// kmsg must be in the lines the helper wrote; loaded is what the fake
		// kernel loaded; records what the run directory holds after.
		kmsg    []string
		loaded  []string
		records []string
	}{
		{name: "alias (crypto-crc32c)", args: []string{"-q", "--", "crypto-crc32c"}, code: 0,
			kmsg:    []string{"<6>kpreload: the kernel requested crypto-crc32c: loaded; loaded crc32c_generic ["},
			loaded:  []string{"crc32c_generic"},
			records: []string{"crypto-crc32c loaded: crc32c_generic loaded kernel-request"}},
		{name: "filesystem alias with a dependency (fs-ext4)", args: []string{"-q", "--", "fs-ext4"}, code: 0,
			kmsg:    []string{"requested fs-ext4: loaded; loaded jbd2, ext4 ["},
			loaded:  []string{"ext4", "jbd2"},
			records: []string{"fs-ext4 loaded: jbd2 loaded kernel-request, ext4 loaded kernel-request"}},
		{name: "module name (nls_cp437)", args: []string{"-q", "--", "nls-cp437"}, code: 0,
			loaded:  []string{"nls_cp437"},
			records: []string{"nls-cp437 loaded: nls_cp437 loaded kernel-request"}},
		{name: "already loaded", args: []string{"-q", "--", "crypto-crc32c"}, code: 0,
			setup:   func(f *fixture) { f.mkdir("sys/module/crc32c_generic") },
			kmsg:    []string{"<6>kpreload: the kernel requested crypto-crc32c: already present; already present crc32c_generic"},
			records: []string{"crypto-crc32c already present: crc32c_generic already loaded kernel-request"}},
		{name: "built in, not in the initramfs", args: []string{"-q", "--", "unix"}, code: 0,
			setup:   func(f *fixture) { f.mkdir("sys/module/unix") },
			records: []string{"unix already present: unix already loaded kernel-request"}},
		{name: "nothing provides it", args: []string{"-q", "--", "crypto-crc32c-all"}, code: 1,
			kmsg:    []string{"<6>kpreload: the kernel requested crypto-crc32c-all: not found (no module of the initramfs has that name or an alias matching it)"},
			records: []string{"crypto-crc32c-all not found: "}},
		{name: "its init fails", args: []string{"-q", "--", "crypto-crc32c"}, code: 1,
			setup:   func(f *fixture) { f.kern.errs["crc32c_generic"] = unix.EIO },
			kmsg:    []string{"<4>kpreload: the kernel requested crypto-crc32c: failed; crc32c_generic failed EIO (crc32c_generic: failed input/output error)"},
			records: []string{"crypto-crc32c failed: crc32c_generic failed kernel-request"}},
		{name: "digest mismatch refused, as /init refuses it", args: []string{"-q", "--", "crypto-crc32c"}, code: 1,
			corrupt: flipCRC32C,
			kmsg:    []string{"<4>", "crc32c_generic refused", "digest mismatch: file sha256"},
			records: []string{"crypto-crc32c failed: crc32c_generic refused kernel-request"}},
		{name: "digest check off on the command line, as for /init", args: []string{"-q", "--", "crypto-crc32c"}, code: 0,
			setup:   func(f *fixture) { f.cmdline = "kpreload.verify=0" },
			corrupt: flipCRC32C,
			loaded:  []string{"crc32c_generic"},
			records: []string{"crypto-crc32c loaded: crc32c_generic loaded kernel-request"}},
		{name: "a driver set loads only once selection chose it", args: []string{"-q", "--", "kpreload_edu"}, code: 1,
			setup:   func(f *fixture) { f.initSets = []testSet{edu("1.0.0")} },
			records: []string{"kpreload_edu not found: "}},
		{name: "no boot index", args: []string{"-q", "--", "crypto-crc32c"}, code: 1,
			setup:   func(f *fixture) { f.noIndex = true },
			kmsg:    []string{"<4>kpreload: the kernel requested crypto-crc32c: failed (boot index: open ", bootIndexName},
			records: []string{"crypto-crc32c failed: "}},
		{name: "unknown option", args: []string{"-v", "--", "crypto-crc32c"}, code: 2,
			kmsg: []string{"<4>kpreload: modprobe: argument 1: unknown option \"-v\" (kpreload's helper takes -q, --, NAME)\n"}},
		{name: "module parameters", args: []string{"-q", "--", "crc32c_generic", "x=1"}, code: 2,
			kmsg: []string{"<4>kpreload: modprobe: argument 4: unexpected \"x=1\" after the name \"crc32c_generic\""}},
		{name: "no name", args: []string{"-q"}, code: 2,
			kmsg: []string{"<4>kpreload: modprobe: no module name given"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, "")
			if c.setup != nil {
				c.setup(f)
			}
			f.writeIndexes()
			if c.corrupt != nil {
				c.corrupt(f)
			}
			code, kmsg := f.helper(c.args...)
			if code != c.code {
				t.Errorf("exit status %d, want %d; kmsg:\n%s", code, c.code, kmsg)
			}
			for _, want := range c.kmsg {
				if !strings.Contains(kmsg, want) {
					t.Errorf("kmsg:\n%s\nwant %q", kmsg, want)
				}
			}
			if n := strings.Count(kmsg, "\n"); n != 1 || len(kmsg) > modprobe.MaxLine {
				t.Errorf("kmsg has %d lines, %d bytes; want one of at most %d:\n%s", n, len(kmsg), modprobe.MaxLine, kmsg)
			}
			if got := f.kern.names(); !slices.Equal(got, c.loaded) {
				t.Errorf("the kernel loaded %q, want %q", got, c.loaded)
			}
			if got := f.records(); !slices.Equal(got, c.records) {
				t.Errorf("records %q, want %q", got, c.records)
			}
		})
	}
}

// flipCRC32C changes crc32c_generic's file after the index recorded its digest.
func flipCRC32C(f *fixture) {
	f.write("initramfs/lib/modules/"+testRelease+"/kernel/crc32c_generic.ko", "\x7fELF flipped")
}

// bootIndexName is the initramfs's boot index as the helper's error names it.
var bootIndexName = filepath.Join("lib/modules", testRelease, "kpreload.index.json")

// stuckKernel is a kernel whose module inits never return until released.
type stuckKernel struct {
	loader.Kernel
	release chan struct{}
}

func (k stuckKernel) FinitModule(fd int, params string, flags int) error {
	<-k.release
	return k.Kernel.FinitModule(fd, params, flags)
}

// TestModprobeDeadline: a module whose init never returns does not keep the
// helper (and the kernel's caller, which waits for it) past its deadline.
func TestModprobeDeadline(t *testing.T) {
	defer func(d time.Duration) { modprobeDeadline = d }(modprobeDeadline)
	modprobeDeadline = 300 * time.Millisecond
	f := newFixture(t, "")
	f.writeIndexes()
	// Never released: a released load would go on writing into the fixture's
	// sys/module while the test's temporary directory is being removed. The
	// blocked goroutine ends with the test binary.
	stuck := stuckKernel{Kernel: f.kern, release: make(chan struct{})}
	o := f.options()
	o.Kernel = stuck
	f.write("dev/kmsg", "")
	start := time.Now()
	code := Modprobe(o, []string{"-q", "--", "crypto-crc32c"})
	took := time.Since(start)
	if code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	if took > 5*time.Second {
		t.Errorf("the helper took %s, want about its deadline, %s", took, modprobeDeadline)
	}
	kmsg, _ := os.ReadFile(f.path("dev/kmsg"))
	if want := "<4>kpreload: the kernel requested crypto-crc32c: timed out (its loads had not finished after 300ms)"; !strings.Contains(string(kmsg), want) {
		t.Errorf("kmsg:\n%s\nwant %q", kmsg, want)
	}
	if got, want := f.records(), []string{"crypto-crc32c timed out: "}; !slices.Equal(got, want) {
		t.Errorf("records %q, want %q", got, want)
	}
}

// TestBootReportsKernelRequests: the requests the helper served before the
// hand-over are in /init's report: their modules, with the name the kernel
// asked for as the reason, and one event each at its time; a record that
// cannot be read is a warning naming it, and the boot goes on.
func TestBootReportsKernelRequests(t *testing.T) {
	f := newFixture(t, "")
	f.writeIndexes()
	for _, name := range []string{"crypto-crc32c", "crypto-crc32c-all"} {
		f.helper("-q", "--", name)
	}
	f.write("run/"+modprobe.RecordDir+"/broken.json", "{")
	o := f.boot()
	if len(o.sys.switched) != 1 {
		t.Fatalf("switch_root calls %q, want one", o.sys.switched)
	}
	var got []string
	for _, m := range o.written.Modules {
		if m.Phase == KernelRequestPhase {
			got = append(got, fmt.Sprintf("%s %s: %s", m.Name, m.Result, m.Reason))
		}
	}
	if want := []string{"crc32c_generic loaded: requested by the kernel: crypto-crc32c"}; !slices.Equal(got, want) {
		t.Errorf("kernel-request modules %q, want %q", got, want)
	}
	events := o.events()
	for _, want := range []string{
		"the kernel requested crypto-crc32c: loaded; loaded crc32c_generic [0.",
		"the kernel requested crypto-crc32c-all: not found (no module of the initramfs has that name or an alias matching it) [0.000s] (served by /init as /sbin/modprobe)",
	} {
		if !strings.Contains(events, want) {
			t.Errorf("events:\n%s\nwant %q", events, want)
		}
	}
	for i := 1; i < len(o.written.Events); i++ {
		if a, b := o.written.Events[i-1], o.written.Events[i]; a.Time > b.Time {
			t.Errorf("event %q at %.3f comes after %q at %.3f", b.What, b.Time, a.What, a.Time)
		}
	}
	if want := f.path("run/"+modprobe.RecordDir+"/broken.json") + ": unexpected end of JSON input"; !slices.ContainsFunc(o.written.Warnings, func(w string) bool { return strings.Contains(w, want) }) {
		t.Errorf("warnings %q, want one containing %q", o.written.Warnings, want)
	}
}
