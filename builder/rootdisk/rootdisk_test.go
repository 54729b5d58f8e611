package rootdisk

import (
	"bytes"
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestMkfsArgs(t *testing.T) {
	tests := []struct {
		uuid string
		want []string
	}{
		{"", []string{"-q", "-F", "-L", "L", "-d", "/s", "-E", "root_owner=0:0", "/o.img", "64M"}},
		{"0b9e3b1c-4f7a-4c55-9d2f-6a7c1e0d2b11", []string{"-q", "-F", "-L", "L", "-U", "0b9e3b1c-4f7a-4c55-9d2f-6a7c1e0d2b11",
			"-d", "/s", "-E", "root_owner=0:0,hash_seed=0b9e3b1c-4f7a-4c55-9d2f-6a7c1e0d2b11", "/o.img", "64M"}},
	}
	for _, tt := range tests {
		if got := MkfsArgs("/s", "/o.img", 64, tt.uuid, "L"); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("MkfsArgs(uuid %q) = %q, want %q", tt.uuid, got, tt.want)
		}
	}
}

func TestBuildRejectsBadOptions(t *testing.T) {
	tests := []struct {
		name string
		o    Options
	}{
		{"no output", Options{Init: "/bin/true"}},
		{"no init", Options{Out: "x.img"}},
		{"negative size", Options{Out: "x.img", Init: "/bin/true", SizeMB: -1}},
		{"missing init", Options{Out: filepath.Join(t.TempDir(), "x.img"), Init: "/nonexistent/init"}},
		{"extra at root", Options{Out: filepath.Join(t.TempDir(), "x.img"), Init: "/bin/true", Extra: map[string]string{"/": t.TempDir()}}},
		{"verity on xfs", Options{Out: filepath.Join(t.TempDir(), "x.img"), Init: "/bin/true", FSType: FSXFS, Verity: true}},
	}
	for _, tt := range tests {
		if err := Build(context.Background(), tt.o); err == nil {
			t.Errorf("Build(%s: %+v) = nil, want an error", tt.name, tt.o)
		}
	}
}

var (
	rootInitOnce sync.Once
	rootInitPath string
	rootInitErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if rootInitPath != "" {
		os.RemoveAll(filepath.Dir(rootInitPath))
	}
	os.Exit(code)
}

// rootInit builds the real rootinit binary once per test run.
func rootInit(t *testing.T) string {
	t.Helper()
	rootInitOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kpreload-rootinit-test-")
		if err != nil {
			rootInitErr = err
			return
		}
		rootInitPath = filepath.Join(dir, "init")
		rootInitErr = BuildRootInit(context.Background(), rootInitPath)
	})
	if rootInitErr != nil {
		t.Fatalf("BuildRootInit: %v", rootInitErr)
	}
	return rootInitPath
}

func TestBuildRootInitIsStatic(t *testing.T) {
	f, err := elf.Open(rootInit(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 {
		t.Errorf("rootinit machine = %v, want EM_X86_64", f.Machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("rootinit has a PT_INTERP header, want a static binary")
		}
	}
}

// tool finds an e2fsprogs, xfsprogs or btrfs-progs program or fails with how to install it.
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found: install it (scripts/deps.sh: e2fsprogs, xfsprogs, btrfs-progs): %v", name, err)
	}
	return p
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(tool(t, name), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestBuildRealImage(t *testing.T) {
	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	if err := os.MkdirAll(filepath.Join(cache, "sets/abc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cache, "sets/abc/edu.ko"), []byte("not really a module\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sets/abc", filepath.Join(cache, "current")); err != nil {
		t.Fatal(err)
	}
	const uuid = "0b9e3b1c-4f7a-4c55-9d2f-6a7c1e0d2b11"
	img := filepath.Join(dir, "disk.img")
	o := Options{Out: img, SizeMB: 48, UUID: uuid, Label: "kp-test", Init: rootInit(t),
		Extra: map[string]string{"/var/lib/kpreload/cache": cache}}
	if err := Build(context.Background(), o); err != nil {
		t.Fatalf("Build(%+v): %v", o, err)
	}
	if st, err := os.Stat(img); err != nil || st.Size() != 48<<20 {
		t.Errorf("image size = %v (%v), want %d", st.Size(), err, 48<<20)
	}

	ls := run(t, "debugfs", "-R", "ls -l /sbin", img)
	t.Logf("debugfs ls -l /sbin:\n%s", ls)
	if !regexp.MustCompile(`100755\s+\(1\)\s+0\s+0\s+\d+\s+1-Jan-2020 00:00 init\b`).MatchString(ls) {
		t.Errorf("debugfs ls -l /sbin = %q, want init with mode 100755 owned by 0:0", ls)
	}
	root := run(t, "debugfs", "-R", "ls /", img)
	for _, d := range []string{"sbin", "etc", "run", "proc", "sys", "dev", "tmp", "var"} {
		if !regexp.MustCompile(`\b` + d + `\b`).MatchString(root) {
			t.Errorf("debugfs ls / = %q, want %s", root, d)
		}
	}
	if got := run(t, "debugfs", "-R", "cat /var/lib/kpreload/cache/sets/abc/edu.ko", img); !strings.Contains(got, "not really a module") {
		t.Errorf("debugfs cat of the copied cache file = %q, want its contents", got)
	}
	if got := run(t, "debugfs", "-R", "stat /var/lib/kpreload/cache/current", img); !strings.Contains(got, `Fast link dest: "sets/abc"`) {
		t.Errorf("debugfs stat of the copied symlink = %q, want a link to sets/abc", got)
	}
	if got := run(t, "debugfs", "-R", "stat /tmp", img); !strings.Contains(got, "Mode:  01777") {
		t.Errorf("debugfs stat /tmp = %q, want mode 01777 (sticky)", got)
	}
	fsck := run(t, "e2fsck", "-fn", img)
	t.Logf("e2fsck -fn:\n%s", fsck)
	head := run(t, "dumpe2fs", "-h", img)
	for _, want := range []string{"Filesystem UUID:          " + uuid, "Filesystem volume name:   kp-test"} {
		if !strings.Contains(head, want) {
			t.Errorf("dumpe2fs -h lacks %q", want)
		}
	}
	blkid := run(t, "blkid", "-p", "-o", "export", img)
	for _, want := range []string{"UUID=" + uuid, "LABEL=kp-test", "TYPE=ext4"} {
		if !strings.Contains(blkid, want+"\n") {
			t.Errorf("blkid -p %s = %q, want %s", img, blkid, want)
		}
	}

	if strings.Contains(head, " verity") {
		t.Errorf("dumpe2fs -h of a root built without Verity names the verity feature")
	}
	// With Verity, the filesystem has ext4's verity feature and is still
	// clean for e2fsck.
	vo := o
	vo.Out, vo.Verity = filepath.Join(dir, "verity.img"), true
	if err := Build(context.Background(), vo); err != nil {
		t.Fatalf("Build(Verity): %v", err)
	}
	if head := run(t, "dumpe2fs", "-h", vo.Out); !regexp.MustCompile(`(?m)^Filesystem features:.* verity\b`).MatchString(head) {
		t.Errorf("dumpe2fs -h of a root built with Verity lacks the verity feature:\n%s", head)
	} else if !strings.Contains(head, "\nBlock size:               4096\n") {
		t.Errorf("dumpe2fs -h of a 48 MiB root built with Verity: block size is not 4096 (the page size fs-verity needs before 6.3):\n%s", head)
	}
	run(t, "e2fsck", "-fn", vo.Out)

	// The same inputs give the same bytes, even built at another time.
	time.Sleep(1100 * time.Millisecond)
	img2 := filepath.Join(dir, "disk2.img")
	o.Out = img2
	if err := Build(context.Background(), o); err != nil {
		t.Fatalf("Build again: %v", err)
	}
	a, _ := os.ReadFile(img)
	b, _ := os.ReadFile(img2)
	if !bytes.Equal(a, b) {
		t.Errorf("two builds with the same options differ, want identical images")
	}
}

func TestBuildPicksSize(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	if err := os.MkdirAll(big, 0o755); err != nil {
		t.Fatal(err)
	}
	// 80 MiB of data does not fit the 64 MiB minimum; Build must grow the image.
	if err := os.WriteFile(filepath.Join(big, "blob"), bytes.Repeat([]byte{0x5a}, 80<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "disk.img")
	if err := Build(context.Background(), Options{Out: img, Init: rootInit(t), Extra: map[string]string{"/data": big}}); err != nil {
		t.Fatalf("Build with an 80 MiB tree and no size: %v", err)
	}
	st, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() < 80<<20 {
		t.Errorf("image size = %d, want more than 80 MiB", st.Size())
	}
	if head := run(t, "dumpe2fs", "-h", img); !strings.Contains(head, "Filesystem volume name:   "+DefaultLabel) {
		t.Errorf("dumpe2fs -h lacks the default label %q", DefaultLabel)
	}
}

func TestModuleRoot(t *testing.T) {
	root, err := ModuleRoot("")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "cmd/kpreload-rootinit/main.go")); err != nil {
		t.Errorf("ModuleRoot() = %s, which has no cmd/kpreload-rootinit/main.go: %v", root, err)
	}
	if _, err := ModuleRoot(t.TempDir()); err == nil {
		t.Errorf("ModuleRoot(an empty directory) = nil error, want one")
	}
}
