package inroot

import (
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tree builds a root and, beside it, an "outside" directory holding files a
// root must never reach. Entries: "f:path=content", "l:path=target",
// "d:path", "p:path" (a FIFO), "s:path" (a sparse file of 1.5 GB).
func tree(t *testing.T, entries ...string) (root, outside string) {
	t.Helper()
	base := t.TempDir()
	root, outside = filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{root, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("host secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		typ, rest, _ := strings.Cut(e, ":")
		name, val, _ := strings.Cut(rest, "=")
		val = strings.ReplaceAll(val, "OUTSIDE", outside)
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch typ {
		case "f":
			err = os.WriteFile(p, []byte(val), 0o644)
		case "l":
			err = os.Symlink(val, p)
		case "d":
			err = os.MkdirAll(p, 0o755)
		case "p":
			err = unix.Mkfifo(p, 0o644)
		case "s":
			if err = os.WriteFile(p, nil, 0o644); err == nil {
				err = os.Truncate(p, 1500<<20)
			}
		default:
			t.Fatalf("bad entry %q", e)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return root, outside
}

// within runs f and fails the test if it has not returned after 10 s (a
// FIFO opened for reading without O_NONBLOCK waits for a writer forever).
func within(t *testing.T, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("hung for 10 s")
	}
}

func TestReadFile(t *testing.T) {
	tests := []struct {
		name    string
		entries []string
		root    string // "" for the tree's root
		file    string
		max     int64
		want    string // content, or the error's text
		wantErr error
	}{
		{name: "regular file", entries: []string{"f:proc/driver/nvidia/version=NVRM version: 580.159.04\n"},
			file: "/proc/driver/nvidia/version", max: MaxText, want: "NVRM version: 580.159.04\n"},
		{name: "relative name", entries: []string{"f:etc/x=1"}, file: "etc/x", max: 10, want: "1"},
		{name: "link inside the root", entries: []string{"f:a/real=in root", "l:b/link=../a/real"}, file: "b/link", max: 10, want: "in root"},
		{name: "absolute link resolves in the root", entries: []string{"f:etc/real=in root", "l:etc/link=/etc/real"}, file: "etc/link", max: 10, want: "in root"},
		{name: "absolute link out of the root", entries: []string{"l:proc/driver/nvidia/version=OUTSIDE/secret"},
			file: "proc/driver/nvidia/version", max: MaxText, wantErr: fs.ErrNotExist},
		{name: "relative link out of the root", entries: []string{"l:proc/version=../../../../../../../../OUTSIDE/secret"},
			file: "proc/version", max: MaxText, wantErr: fs.ErrNotExist},
		{name: "directory link out of the root", entries: []string{"l:proc=OUTSIDE"}, file: "proc/secret", max: MaxText, wantErr: fs.ErrNotExist},
		{name: ".. in the name", entries: nil, file: "../outside/secret", max: MaxText, wantErr: fs.ErrNotExist},
		{name: "/proc linked to the host's /proc", entries: []string{"l:proc=/proc"}, file: "proc/devices", max: MaxText, wantErr: syscall.ELOOP},
		{name: "link to /dev/zero resolves in the root", entries: []string{"l:etc/ld.so.cache=/dev/zero"}, file: "etc/ld.so.cache", max: MaxLarge, wantErr: fs.ErrNotExist},
		{name: "FIFO", entries: []string{"p:proc/driver/nvidia/version"}, file: "proc/driver/nvidia/version", max: MaxText, wantErr: ErrNotRegular},
		{name: "link to a FIFO", entries: []string{"p:run/fifo", "l:run/kpreload/ready=/run/fifo"}, file: "run/kpreload/ready", max: MaxText, wantErr: ErrNotRegular},
		{name: "directory", entries: []string{"d:etc/ld.so.cache"}, file: "etc/ld.so.cache", max: MaxLarge, wantErr: ErrNotRegular},
		{name: "the host's /dev/zero", root: "/", file: "/dev/zero", max: MaxLarge, wantErr: ErrNotRegular},
		{name: "magic link", root: "/", file: "/proc/self/root/etc/hostname", max: MaxText, wantErr: syscall.ELOOP},
		{name: "exactly the bound", entries: []string{"f:f=12345"}, file: "f", max: 5, want: "12345"},
		{name: "one byte over the bound", entries: []string{"f:f=123456"}, file: "f", max: 5, wantErr: ErrTooLarge},
		{name: "1.5 GB version file", entries: []string{"s:proc/driver/nvidia/version"}, file: "proc/driver/nvidia/version", max: MaxText, wantErr: ErrTooLarge},
		{name: "procfs file of stat size 0", root: "/", file: "/proc/self/stat", max: MaxText, want: "(" /* the command's name follows the pid */},
		{name: "missing", file: "proc/devices", max: MaxText, wantErr: fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, outside := tree(t, tt.entries...)
			if tt.root != "" {
				root = tt.root
			}
			var got []byte
			var err error
			within(t, func() { got, err = ReadFile(root, tt.file, tt.max) })
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("ReadFile = %q, %v; want an error wrapping %v", got, err, tt.wantErr)
				}
				if want := filepath.Join(root, filepath.Clean("/"+tt.file)); !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %s", err, want)
				}
				if strings.Contains(err.Error(), outside) {
					t.Errorf("error %q names the outside", err)
				}
				return
			}
			if err != nil || !strings.Contains(string(got), tt.want) {
				t.Errorf("ReadFile = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// TestReadFileAllocatesTheBound reads a 1.5 GB file with a 1 MiB bound: what
// is allocated stays near the bound, not the size the file claims.
func TestReadFileAllocatesTheBound(t *testing.T) {
	root, _ := tree(t, "s:big")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ReadFile(root, "big", MaxText)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 4*MaxText {
		t.Errorf("allocated %d bytes reading with a bound of %d", got, MaxText)
	}
}

func TestOpen(t *testing.T) {
	root, _ := tree(t, "f:a=hello", "p:fifo")
	f, err := Open(root, "/a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(f)
	f.Close()
	if got, want := string(b), "hello"; err != nil || got != want {
		t.Errorf("read %q, %v; want %q", got, err, want)
	}
	within(t, func() { _, err = Open(root, "fifo") })
	if !errors.Is(err, ErrNotRegular) {
		t.Errorf("Open(fifo) = %v, want ErrNotRegular", err)
	}
}

func TestReadPath(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	if got, err := ReadPath("config.json", 10); err != nil || string(got) != "{}" {
		t.Errorf("ReadPath(relative) = %q, %v; want {}", got, err)
	}
	if _, err := ReadPath("missing.json", 10); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("ReadPath(missing) = %v, want a not-exist error naming missing.json", err)
	}
}

func TestStat(t *testing.T) {
	root, _ := tree(t, "f:a/file=x", "l:a/link=file", "l:a/out=OUTSIDE/secret", "d:a/dir", "p:a/fifo")
	sock := filepath.Join(root, "a/sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tests := []struct {
		name     string
		lstat    bool
		wantMode fs.FileMode // type bits
		wantErr  error
	}{
		{"a/file", false, 0, nil},
		{"a/link", false, 0, nil},
		{"a/link", true, fs.ModeSymlink, nil},
		{"a/out", false, 0, fs.ErrNotExist},
		{"a/out", true, fs.ModeSymlink, nil},
		{"a/dir", false, fs.ModeDir, nil},
		{"a/fifo", false, fs.ModeNamedPipe, nil},
		{"a/sock", false, fs.ModeSocket, nil},
	}
	for _, tt := range tests {
		stat := Stat
		if tt.lstat {
			stat = Lstat
		}
		fi, err := stat(root, tt.name)
		if tt.wantErr != nil {
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("stat(%s, lstat %v) = %v, want %v", tt.name, tt.lstat, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("stat(%s, lstat %v): %v", tt.name, tt.lstat, err)
			continue
		}
		if got := fi.Mode().Type(); got != tt.wantMode {
			t.Errorf("stat(%s, lstat %v) type = %v, want %v", tt.name, tt.lstat, got, tt.wantMode)
		}
		if got, want := fi.Name(), filepath.Base(tt.name); got != want {
			t.Errorf("stat(%s).Name() = %q, want %q", tt.name, got, want)
		}
	}
	fi, err := Stat(root, "a/file")
	if err != nil || fi.Size() != 1 || fi.Mode().Perm() != 0o644 || fi.ModTime().IsZero() {
		t.Errorf("Stat(a/file) = size %d mode %v time %v, %v; want 1, 0644, a time", fi.Size(), fi.Mode(), fi.ModTime(), err)
	}
}

func TestReadlink(t *testing.T) {
	root, _ := tree(t, "f:file=x", "l:dir/link=/etc/passwd", "l:up=dir")
	tests := []struct {
		name, want string
		wantErr    bool
	}{
		{"dir/link", "/etc/passwd", false},
		{"up/link", "/etc/passwd", false}, // the link before it resolves in the root
		{"file", "", true},                // not a link
		{"missing", "", true},
	}
	for _, tt := range tests {
		got, err := Readlink(root, tt.name)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("Readlink(%s) = %q, %v; want %q (error %v)", tt.name, got, err, tt.want, tt.wantErr)
		}
	}
	// A magic link's text is read, not followed.
	f, err := os.Open(filepath.Join(root, "file"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := Readlink("/", filepath.Join("/proc/self/fd", strconv.Itoa(int(f.Fd()))))
	if want := filepath.Join(root, "file"); err != nil || got != want {
		t.Errorf("Readlink(/proc/self/fd/N) = %q, %v; want %q", got, err, want)
	}
}

func TestEvalSymlinks(t *testing.T) {
	root, _ := tree(t,
		"d:usr/lib/x86_64-linux-gnu",
		"f:usr/lib/x86_64-linux-gnu/libcuda.so.1=elf",
		"l:lib=usr/lib",
		"l:abs=/usr/lib/x86_64-linux-gnu",
		"l:out=../../../../OUTSIDE",
		"l:outabs=OUTSIDE",
		"l:loop1=loop2", "l:loop2=loop1",
		"l:usr/lib/x86_64-linux-gnu/libcuda.so=libcuda.so.1",
	)
	tests := []struct {
		name, want string
		wantErr    error
	}{
		{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", nil},
		{"abs/libcuda.so", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", nil},
		{"lib/../lib/./x86_64-linux-gnu/libcuda.so", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", nil},
		{"../../../usr", "/usr", nil},
		{"/", "/", nil},
		{"out", "", fs.ErrNotExist},
		{"outabs/secret", "", fs.ErrNotExist},
		{"loop1", "", syscall.ELOOP},
		{"usr/lib/x86_64-linux-gnu/libcuda.so.1/x", "", syscall.ENOTDIR},
	}
	for _, tt := range tests {
		got, err := EvalSymlinks(root, tt.name)
		if tt.wantErr != nil {
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("EvalSymlinks(%s) = %q, %v; want an error wrapping %v", tt.name, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("EvalSymlinks(%s) = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
}

func TestReadDir(t *testing.T) {
	root, _ := tree(t, "f:d/b=1", "l:d/a=OUTSIDE/secret", "d:d/c", "l:lnk=OUTSIDE")
	ents, err := ReadDir(root, "/d")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e.Name()+" "+e.Type().String()+" "+fi.Mode().Type().String())
	}
	want := []string{"a L--------- L---------", "b ---------- ----------", "c d--------- d---------"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ReadDir = %q, want %q", got, want)
	}
	// A directory link out of the root lists the root's own directory.
	if _, err := ReadDir(root, "lnk"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadDir(link out) = %v, want not-exist", err)
	}
	if _, err := ReadDir(root, "d/b"); err == nil || !strings.Contains(err.Error(), filepath.Join(root, "d/b")) {
		t.Errorf("ReadDir(file) = %v, want an error naming it", err)
	}
}

func TestGlob(t *testing.T) {
	root, _ := tree(t,
		"f:proc/driver/nvidia/gpus/0000:00:06.0/information=x",
		"f:proc/driver/nvidia/gpus/0000:00:07.0/information=x",
		"d:proc/driver/nvidia/gpus/0000:00:08.0",
		"l:proc/driver/nvidia/gpus/0000:00:09.0=OUTSIDE",
		"d:sys/class/misc/kpreload-edu0",
		"d:sys/class/misc/tun",
	)
	tests := []struct {
		pattern string
		want    []string
	}{
		{"/proc/driver/nvidia/gpus/*/information", []string{"/proc/driver/nvidia/gpus/0000:00:06.0/information", "/proc/driver/nvidia/gpus/0000:00:07.0/information"}},
		{"sys/class/misc/kpreload-edu*", []string{"/sys/class/misc/kpreload-edu0"}},
		{"sys/class/misc/tun", []string{"/sys/class/misc/tun"}},
		{"sys/class/none/*", nil},
	}
	for _, tt := range tests {
		got, err := Glob(root, tt.pattern)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Glob(%s) = %q, %v; want %q", tt.pattern, got, err, tt.want)
		}
	}
	if _, err := Glob(root, "a/[x"); err == nil {
		t.Error("Glob accepted a bad pattern")
	}
}

func TestLiveRoot(t *testing.T) {
	// The live system: procfs files say size 0, sysfs ones 4096.
	b, err := ReadFile("/", "/proc/self/status", MaxText)
	if err != nil || !strings.Contains(string(b), "Name:") {
		t.Errorf("ReadFile(/proc/self/status) = %q, %v", b, err)
	}
	if _, err := os.Stat("/sys/kernel"); err == nil {
		if _, err := ReadFile("/", "/sys/kernel/uevent_seqnum", MaxAttr); err != nil {
			t.Errorf("ReadFile(/sys/kernel/uevent_seqnum): %v", err)
		}
	}
}
