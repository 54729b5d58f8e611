package modprobe

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kpreload/kpreload/report"
)

func TestInvoked(t *testing.T) {
	for _, c := range []struct {
		args []string
		pid  int
		want bool
	}{
		{[]string{"/sbin/modprobe", "-q", "--", "crypto-crc32c"}, 312, true},
		{[]string{"modprobe"}, 2000, true},
		{[]string{"/sbin/modprobe", "-q", "--", "fs-ext4"}, 1, false}, // process 1 is the boot, whatever its name
		{[]string{"/init"}, 1, false},
		{[]string{"/init"}, 312, false},
		{[]string{"/sbin/modprobe.old"}, 312, false},
		{nil, 312, false},
	} {
		if got := Invoked(c.args, c.pid); got != c.want {
			t.Errorf("Invoked(%q, %d) = %v, want %v", c.args, c.pid, got, c.want)
		}
	}
}

func TestParse(t *testing.T) {
	long := strings.Repeat("a", MaxNameLen+1)
	for _, c := range []struct {
		args    []string
		want    Request
		wantErr string
	}{
		// What the kernel's request_module passes (kernel/kmod.c call_modprobe).
		{args: []string{"-q", "--", "crypto-crc32c"}, want: Request{Name: "crypto-crc32c", Quiet: true}},
		{args: []string{"-q", "--", "crypto-cbc(aes)-all"}, want: Request{Name: "crypto-cbc(aes)-all", Quiet: true}},
		{args: []string{"--quiet", "--", "fs-vfat"}, want: Request{Name: "fs-vfat", Quiet: true}},
		{args: []string{"nls_cp437"}, want: Request{Name: "nls_cp437"}},
		{args: []string{"--", "-odd-name"}, want: Request{Name: "-odd-name"}},
		{args: []string{"-q", "--", strings.Repeat("a", MaxNameLen)}, want: Request{Name: strings.Repeat("a", MaxNameLen), Quiet: true}},
		{args: nil, wantErr: "no module name given"},
		{args: []string{"-q", "--"}, wantErr: "no module name given"},
		{args: []string{"-v", "--", "ext4"}, wantErr: `argument 1: unknown option "-v"`},
		{args: []string{"-r", "ext4"}, wantErr: `unknown option "-r"`},
		{args: []string{"--show-depends", "ext4"}, wantErr: `unknown option "--show-depends"`},
		{args: []string{"-q", "--", "ext4", "debug=1"}, wantErr: `argument 4: unexpected "debug=1" after the name "ext4"`},
		{args: []string{"-q", "--", ""}, wantErr: "argument 3: empty module name"},
		{args: []string{"-q", "--", "a b"}, wantErr: `module name "a b": byte 1 is 0x20`},
		{args: []string{"-q", "--", "a\nb"}, wantErr: "byte 1 is 0x0a"},
		{args: []string{"-q", "--", "caf\xc3\xa9"}, wantErr: "byte 3 is 0xc3"},
		{args: []string{"-q", "--", long}, wantErr: fmt.Sprintf("is %d bytes, longer than %d", MaxNameLen+1, MaxNameLen)},
		{args: []string{"-q", "-q", "-q", "-q", "-q", "-q", "-q", "--", "x"}, wantErr: "9 arguments, at most 8"},
	} {
		got, err := Parse(c.args)
		switch {
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("Parse(%q) error = %v, want one containing %q", c.args, err, c.wantErr)
		case c.wantErr == "" && err != nil:
			t.Errorf("Parse(%q): %v", c.args, err)
		case got != c.want:
			t.Errorf("Parse(%q) = %+v, want %+v", c.args, got, c.want)
		}
	}
}

func TestRecordLine(t *testing.T) {
	for _, c := range []struct {
		r    Record
		want string
	}{
		{Record{Request: "crypto-crc32c", Start: 3.1, End: 3.125, Outcome: Loaded, Modules: []report.Module{
			{Name: "crc32c_generic", Result: "loaded"},
			{Name: "crc32c_intel", Result: "failed", Errno: "ENODEV", Reason: "module initialised but found no device it supports (ENODEV)"},
		}}, "kpreload: the kernel requested crypto-crc32c: loaded; loaded crc32c_generic; crc32c_intel failed ENODEV [0.025s]"},
		{Record{Request: "nls_cp437", Start: 1, End: 1, Outcome: Present, Modules: []report.Module{{Name: "nls_cp437", Result: "already loaded"}}},
			"kpreload: the kernel requested nls_cp437: already present; already present nls_cp437 [0.000s]"},
		{Record{Request: "crypto-crc32c-all", Start: 1, End: 1.5, Outcome: NotFound, Reason: "no module"},
			"kpreload: the kernel requested crypto-crc32c-all: not found (no module) [0.500s]"},
		{Record{Request: "x", Outcome: Failed, Reason: "a\nb"}, "kpreload: the kernel requested x: failed (a b) [0.000s]"},
	} {
		if got := c.r.Line(); got != c.want {
			t.Errorf("Line() = %q\nwant     %q", got, c.want)
		}
	}
	// Bounded, however many modules failed and however long their reasons.
	r := Record{Request: "crypto-x", Outcome: Failed, Reason: strings.Repeat("why ", 200)}
	for i := range 40 {
		r.Modules = append(r.Modules, report.Module{Name: fmt.Sprintf("mod%02d", i), Result: "refused"})
	}
	if got := r.Line(); len(got) > MaxLine-8 || !strings.HasSuffix(got, "...") {
		t.Errorf("Line() of a long record is %d bytes (%q), want at most %d ending in ...", len(got), got, MaxLine-8)
	}
}

func TestRecordsRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kpreload", "modprobe")
	want := []Record{
		{Request: "crypto-crc32c", Start: 3.2, End: 3.25, Outcome: Loaded, Modules: []report.Module{{Name: "crc32c_generic", Result: "loaded", Phase: "kernel-request"}}},
		{Request: "crypto-crc32c-all", Start: 3.3, End: 3.31, Outcome: NotFound, Reason: "no module"},
	}
	// Written in the other order: read back by start time.
	for _, r := range []Record{want[1], want[0]} {
		if err := WriteRecord(dir, r); err != nil {
			t.Fatal(err)
		}
	}
	// A record being written (the temporary file) is not read.
	if err := os.WriteFile(filepath.Join(dir, ".request-1.tmp"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, errs := ReadRecords(dir)
	if len(errs) > 0 {
		t.Fatalf("ReadRecords: %v", errs)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ReadRecords = %+v\nwant %+v", got, want)
	}
	if got, errs := ReadRecords(filepath.Join(dir, "absent")); len(got) != 0 || len(errs) != 0 {
		t.Errorf("ReadRecords of a missing directory = %v, %v; want nothing", got, errs)
	}
}

func TestWriteRecordBounds(t *testing.T) {
	dir := t.TempDir()
	r := Record{Request: "fs-vfat", Outcome: Loaded}
	for range 30 {
		r.Modules = append(r.Modules, report.Module{Name: "m", Result: "loaded"})
	}
	for i := range MaxRecords {
		if err := WriteRecord(dir, r); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	err := WriteRecord(dir, r)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("already holds %d records", MaxRecords)) {
		t.Errorf("record %d: error %v, want one saying the directory is full", MaxRecords+1, err)
	}
	got, errs := ReadRecords(dir)
	if len(got) != MaxRecords || len(errs) != 0 {
		t.Fatalf("ReadRecords: %d records, errors %v; want %d, none", len(got), errs, MaxRecords)
	}
	if n := len(got[0].Modules); n != MaxModules {
		t.Errorf("a record keeps %d modules, want %d", n, MaxModules)
	}
}

func TestReadRecordsRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	if err := WriteRecord(dir, Record{Request: "fs-ext4", Outcome: Present}); err != nil {
		t.Fatal(err)
	}
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("broken.json", `{"request": "fs-`)
	write("huge.json", `{"request":"x","reason":"`+strings.Repeat("y", MaxRecordSize)+`"}`)
	write("badname.json", `{"request":"a b","outcome":"loaded"}`)
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "link.json")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, errs := ReadRecords(dir)
	if len(got) != 1 || got[0].Request != "fs-ext4" {
		t.Errorf("ReadRecords kept %+v, want the one good record", got)
	}
	var msgs []string
	for _, e := range errs {
		msgs = append(msgs, e.Error())
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{
		filepath.Join(dir, "broken.json") + ": unexpected end of JSON input",
		filepath.Join(dir, "huge.json") + ": ",
		filepath.Join(dir, "badname.json") + ": request: module name \"a b\"",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("ReadRecords errors:\n%s\nwant one containing %q", all, want)
		}
	}
	// The link and the FIFO are not regular files: never listed, never opened.
	if len(errs) != 3 {
		t.Errorf("ReadRecords gave %d errors, want 3:\n%s", len(errs), all)
	}
}

// TestInstall: the link is made under a root that lacks it (and its
// directory), kept where an archive carried it, and refused over anything
// else, which the error names.
func TestInstall(t *testing.T) {
	for _, c := range []struct {
		name    string
		before  func(t *testing.T, p string)
		wantErr string
	}{
		{"none there", func(*testing.T, string) {}, ""},
		{"the archive's link", func(t *testing.T, p string) { mustSymlink(t, HelperTarget, p) }, ""},
		{"another link", func(t *testing.T, p string) { mustSymlink(t, "/usr/bin/kmod", p) }, "file exists"},
		{"a file", func(t *testing.T, p string) {
			if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, "file exists"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			p := filepath.Join(root, HelperPath)
			if c.name != "none there" {
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			c.before(t, p)
			err := Install(root)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), p) {
					t.Errorf("Install = %v, want an error naming %s and %q", err, p, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Install = %v, want nil", err)
			}
			if got, err := os.Readlink(p); err != nil || got != HelperTarget {
				t.Errorf("%s links to %q (%v), want %q", HelperPath, got, err, HelperTarget)
			}
		})
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}
