package archive

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestAddFileNames(t *testing.T) {
	tests := []struct {
		name    string
		wantErr string // substring; "" means accepted
	}{
		{"init", ""},
		{"lib/modules/6.1.0-56-cloud-amd64/kernel/x.ko", ""},
		{"a..b/c", ""},
		{"...", ""},
		{"", "empty"},
		{"/init", "absolute"},
		{"./init", `"." component`},
		{"a/./b", `"." component`},
		{".", `"." component`},
		{"..", `".." component`},
		{"../init", `".." component`},
		{"a/../../etc/passwd", `".." component`},
		{"a/..", `".." component`},
		{"a//b", "empty component"},
		{"a/", "empty component"},
		{"a\x00b", "NUL"},
		{"TRAILER!!!", "reserved"},
		{strings.Repeat("a", 4096), "longer than"},
	}
	for _, tt := range tests {
		err := New().AddFile(tt.name, 0o644, nil)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("AddFile(%q) = %v, want nil", tt.name, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("AddFile(%.50q) = %v, want an error containing %q", tt.name, err, tt.wantErr)
		case tt.wantErr != "" && tt.name != "" && len(tt.name) < 100 && !strings.Contains(err.Error(), fmt.Sprintf("%q", tt.name)):
			t.Errorf("AddFile(%q) = %v, want the error to name the path", tt.name, err)
		}
	}
}

func TestAddSymlinkTargets(t *testing.T) {
	tests := []struct {
		link, target string
		wantErr      string
	}{
		{"bin", "usr/bin", ""},
		{"lib64", "lib", ""},
		{"a/b", "../x", ""},
		{"a/b/c", "../../x/y", ""},
		{"a", ".", ""},
		{"a/b", "c/../../d", ""},
		{"dangling", "does/not/exist", ""},
		{"a/b", "../../x", "escapes the archive root"},
		{"a", "..", "escapes the archive root"},
		{"a/b", "c/../../../d", "escapes the archive root"},
		{"a/b", "/etc/passwd", "absolute"},
		{"a", "", "empty target"},
		{"a", "x\x00y", "NUL"},
		{"/a", "x", "absolute"},
		{"a/../b", "x", `".." component`},
	}
	for _, tt := range tests {
		err := New().AddSymlink(tt.link, tt.target)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("AddSymlink(%q, %q) = %v, want nil", tt.link, tt.target, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("AddSymlink(%q, %q) = %v, want an error containing %q", tt.link, tt.target, err, tt.wantErr)
		case tt.wantErr != "" && !strings.Contains(err.Error(), fmt.Sprintf("%q", tt.link)):
			t.Errorf("AddSymlink(%q, %q) = %v, want the error to name the link", tt.link, tt.target, err)
		}
	}
}

// TestEncodeSymlinkChains covers escapes visible only once the archive's own
// symlinks are followed, which Encode checks on the complete set.
func TestEncodeSymlinkChains(t *testing.T) {
	tests := []struct {
		desc    string
		links   [][2]string
		wantErr string
	}{
		{"chain inside", [][2]string{{"x/up", ".."}, {"x/y", "up/z"}}, ""},
		{"chain climbing out", [][2]string{{"x/up", ".."}, {"x/y", "up/../z"}}, `symlink "x/y"`},
		{"loop", [][2]string{{"l1", "l2"}, {"l2", "l1"}}, "levels of symlinks"},
	}
	for _, tt := range tests {
		a := New()
		for _, l := range tt.links {
			if err := a.AddSymlink(l[0], l[1]); err != nil {
				t.Fatalf("%s: AddSymlink(%q, %q) = %v", tt.desc, l[0], l[1], err)
			}
		}
		_, err := a.Encode(io.Discard, None)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s: Encode = %v, want nil", tt.desc, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s: Encode = %v, want an error containing %q", tt.desc, err, tt.wantErr)
		}
	}
}

func TestAddConflicts(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, []byte("same"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "other")
	if err := os.WriteFile(other, []byte("diff"), 0o600); err != nil {
		t.Fatal(err)
	}
	type step func(a *Archive) error
	file := func(name string, mode fs.FileMode, data string) step {
		return func(a *Archive) error { return a.AddFile(name, mode, []byte(data)) }
	}
	from := func(name, src string) step {
		return func(a *Archive) error { return a.AddFileFrom(name, 0o644, src) }
	}
	dir := func(name string, mode fs.FileMode) step {
		return func(a *Archive) error { return a.AddDir(name, mode) }
	}
	link := func(name, target string) step {
		return func(a *Archive) error { return a.AddSymlink(name, target) }
	}
	tests := []struct {
		desc    string
		first   []step
		second  step
		wantErr string
	}{
		{"identical file", []step{file("f", 0o644, "x")}, file("f", 0o644, "x"), ""},
		{"file content differs", []step{file("f", 0o644, "x")}, file("f", 0o644, "y"), `add "f": already in the archive`},
		{"file mode differs", []step{file("f", 0o644, "x")}, file("f", 0o755, "x"), "already in the archive"},
		{"memory vs disk, same bytes", []step{file("f", 0o644, "same")}, from("f", src), ""},
		{"disk vs disk, same bytes", []step{from("f", src)}, from("f", src), ""},
		{"disk vs disk, other bytes", []step{from("f", src)}, from("f", other), "already in the archive"},
		{"identical symlink", []step{link("l", "x")}, link("l", "x"), ""},
		{"symlink target differs", []step{link("l", "x")}, link("l", "y"), "already in the archive"},
		{"identical dir", []step{dir("d", 0o700)}, dir("d", 0o700), ""},
		{"dir mode differs", []step{dir("d", 0o700)}, dir("d", 0o755), "already in the archive"},
		{"implied dir made explicit", []step{file("d/f", 0o644, "")}, dir("d", 0o700), ""},
		{"file over implied dir", []step{file("d/f", 0o644, "")}, file("d", 0o644, ""), "already a directory"},
		{"symlink over implied dir", []step{file("d/f", 0o644, "")}, link("d", "x"), "already a directory"},
		{"entry below a file", []step{file("f", 0o644, "")}, file("f/g", 0o644, ""), `parent "f" is a regular file`},
		{"entry below a symlink", []step{link("lib", "usr/lib")}, file("lib/x.so", 0o644, ""), `parent "lib" is a symlink`},
		{"dir where a file is", []step{file("f", 0o644, "")}, dir("f", 0o755), "already in the archive"},
		{"file with type bits", nil, file("f", fs.ModeDir|0o755, ""), "bits other than permissions"},
	}
	for _, tt := range tests {
		a := New()
		for _, s := range tt.first {
			if err := s(a); err != nil {
				t.Fatalf("%s: setup: %v", tt.desc, err)
			}
		}
		before := a.Entries()
		err := tt.second(a)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s: second add = %v, want nil", tt.desc, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s: second add = %v, want an error containing %q", tt.desc, err, tt.wantErr)
		case tt.wantErr != "":
			if after := a.Entries(); !reflect.DeepEqual(after, before) {
				t.Errorf("%s: failed add changed the entries from %v to %v", tt.desc, before, after)
			}
		}
	}
}

func TestEntries(t *testing.T) {
	a := New()
	for _, err := range []error{
		a.AddFile("lib/modules/k/a.ko", 0o644, []byte("ko")),
		a.AddFile("init", 0o755, []byte("i")),
		a.AddDir("lib", 0o700),
		a.AddFile("lib-x", 0o644, nil),
		a.AddSymlink("dev/fd", "../proc/self/fd"),
		a.AddSymlink("sbin", "bin"),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	got := a.Entries()
	want := []Entry{
		{Name: "dev", Mode: fs.ModeDir | 0o755, Implicit: true},
		{Name: "dev/fd", Mode: fs.ModeSymlink | 0o777, Target: "../proc/self/fd"},
		{Name: "init", Mode: 0o755, Size: 1},
		{Name: "lib", Mode: fs.ModeDir | 0o700},
		{Name: "lib-x", Mode: 0o644},
		{Name: "lib/modules", Mode: fs.ModeDir | 0o755, Implicit: true},
		{Name: "lib/modules/k", Mode: fs.ModeDir | 0o755, Implicit: true},
		{Name: "lib/modules/k/a.ko", Mode: 0o644, Size: 2},
		{Name: "sbin", Mode: fs.ModeSymlink | 0o777, Target: "bin"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Entries() =\n%+v\nwant\n%+v", got, want)
	}
	for name, want := range map[string]bool{"lib/modules": true, "init": true, "nope": false, "/init": false} {
		if got := a.Has(name); got != want {
			t.Errorf("Has(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestParseCompression(t *testing.T) {
	tests := []struct {
		in      string
		want    Compression
		wantErr bool
	}{
		{"", Zstd, false},
		{"zstd", Zstd, false},
		{"ZSTD", Zstd, false},
		{"gzip", Gzip, false},
		{"lz4", LZ4, false},
		{"LZ4", LZ4, false},
		{"none", None, false},
		{"xz", "", true},
		{"zst", "", true},
	}
	for _, tt := range tests {
		got, err := ParseCompression(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ParseCompression(%q) = %q, %v, want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseSourceDateEpoch(t *testing.T) {
	tests := []struct {
		env     string
		want    int64
		wantErr bool
	}{
		{"", 0, false},
		{"1700000000", 1700000000, false},
		{"0", 0, false},
		{"-1", 0, true},
		{"17e8", 0, true},
		{" 5", 0, true},
		{"abc", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseSourceDateEpoch(tt.env)
		if (err != nil) != tt.wantErr || (err == nil && got.Unix() != tt.want) {
			t.Errorf("ParseSourceDateEpoch(%q) = %v, %v, want %d, error %v", tt.env, got.Unix(), err, tt.want, tt.wantErr)
		}
	}
	a := New()
	for _, tt := range []struct {
		t       time.Time
		wantErr bool
	}{
		{time.Unix(0, 0), false},
		{time.Unix(1<<32-1, 0), false},
		{time.Unix(-1, 0), true},
		{time.Unix(1<<32, 0), true},
	} {
		if err := a.SetModTime(tt.t); (err != nil) != tt.wantErr {
			t.Errorf("SetModTime(%d) = %v, want error %v", tt.t.Unix(), err, tt.wantErr)
		}
	}
}
