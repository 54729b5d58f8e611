package rootdisk

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestMkfsXFSAndBtrfsArgs(t *testing.T) {
	const uuid = "0b9e3b1c-4f7a-4c55-9d2f-6a7c1e0d2b11"
	tests := []struct {
		name string
		got  []string
		want []string
	}{
		{"xfs", MkfsXFSArgs("/p", "/o.img", "", "L"), []string{"-q", "-f", "-L", "L", "-p", "/p", "/o.img"}},
		{"xfs uuid", MkfsXFSArgs("/p", "/o.img", uuid, "L"), []string{"-q", "-f", "-L", "L", "-m", "uuid=" + uuid, "-p", "/p", "/o.img"}},
		{"btrfs", MkfsBtrfsArgs("/s", "/o.img", "", "L"), []string{"-q", "-f", "-L", "L", "--rootdir", "/s", "/o.img"}},
		{"btrfs uuid", MkfsBtrfsArgs("/s", "/o.img", uuid, "L"), []string{"-q", "-f", "-L", "L", "-U", uuid, "--rootdir", "/s", "/o.img"}},
	}
	for _, tt := range tests {
		if !reflect.DeepEqual(tt.got, tt.want) {
			t.Errorf("%s: args = %q, want %q", tt.name, tt.got, tt.want)
		}
	}
}

func TestXFSProto(t *testing.T) {
	stage := t.TempDir()
	for _, d := range []string{"sbin", "tmp", "var/lib/kpreload/cache/sets", "empty"} {
		if err := os.MkdirAll(filepath.Join(stage, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]os.FileMode{"sbin/init": 0o755, "var/lib/kpreload/cache/sets/a.json": 0o644, "sbin/suid": os.ModeSetuid | 0o711}
	for f, mode := range files {
		if err := os.WriteFile(filepath.Join(stage, f), []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(stage, f), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(stage, "tmp"), os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sets/a.json", filepath.Join(stage, "var/lib/kpreload/cache/current")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(stage, 0o755); err != nil {
		t.Fatal(err)
	}
	uid, gid := os.Getuid(), os.Getgid()
	id := func(s string) string {
		return strings.NewReplacer("U", strconv.Itoa(uid), "G", strconv.Itoa(gid)).Replace(s)
	}
	got, sticky, err := XFSProto(stage)
	if err != nil {
		t.Fatal(err)
	}
	want := id(`/dev/null
0 0
d--755 0 0
  empty d--755 U G
  $
  sbin d--755 U G
    init ---755 U G ` + stage + `/sbin/init
    suid -u-711 U G ` + stage + `/sbin/suid
  $
  tmp d--777 U G
  $
  var d--755 U G
    lib d--755 U G
      kpreload d--755 U G
        cache d--755 U G
          current l--777 U G sets/a.json
          sets d--755 U G
            a.json ---644 U G ` + stage + `/var/lib/kpreload/cache/sets/a.json
          $
        $
      $
    $
  $
$
`)
	if got != want {
		t.Errorf("XFSProto =\n%s\nwant\n%s", got, want)
	}
	if wantSticky := []stickyDir{{path: "/tmp", mode: 0o41777}}; !reflect.DeepEqual(sticky, wantSticky) {
		t.Errorf("XFSProto sticky = %+v, want %+v", sticky, wantSticky)
	}
}

func TestXFSProtoRefusesNames(t *testing.T) {
	for _, tt := range []struct{ name, link, want string }{
		{name: "a b", want: `/a b: an xfs prototype file cannot hold this name: white space`},
		{name: "$", want: `/$: an xfs prototype file cannot hold this name: "$" ends a directory`},
		{name: ":c", want: `/:c: an xfs prototype file cannot hold this name: a token starting with ':'`},
		{name: "l", link: "x\ty", want: `/l: an xfs prototype file cannot hold the link target "x\ty"`},
	} {
		stage := t.TempDir()
		p := filepath.Join(stage, tt.name)
		var err error
		if tt.link != "" {
			err = os.Symlink(tt.link, p)
		} else {
			err = os.WriteFile(p, nil, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := XFSProto(stage); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("XFSProto with %q (link %q) = %v, want an error containing %q", tt.name, tt.link, err, tt.want)
		}
	}
}

func TestBuildRejectsBadFilesystemOptions(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x.img")
	for _, tt := range []struct {
		o    Options
		want string
	}{
		{Options{Out: out, Init: "/bin/true", FSType: "zfs"}, `filesystem "zfs": want one of ext4, xfs, btrfs`},
		{Options{Out: out, Init: "/bin/true", FSType: "xfs", SizeMB: 200}, "size 200 MiB is too small for xfs: mkfs.xfs needs at least 300 MiB"},
		{Options{Out: out, Init: "/bin/true", FSType: "btrfs", SizeMB: 64}, "size 64 MiB is too small for btrfs: mkfs.btrfs needs at least 109 MiB"},
		{Options{Out: out, Init: "/bin/true", FSType: "xfs", Label: "kpreload-root"}, `label "kpreload-root" has 13 characters; xfs labels hold at most 12`},
		{Options{Out: out, Init: "/bin/true", Label: "a-label-of-17-chr"}, `label "a-label-of-17-chr" has 17 characters; ext4 labels hold at most 16`},
	} {
		err := Build(context.Background(), tt.o)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Build(%+v) = %v, want an error containing %q", tt.o, err, tt.want)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("refused builds left %s behind (%v)", out, err)
	}
}

// stageCache makes a small module-cache-like tree with a symlink in it.
func stageCache(t *testing.T) string {
	t.Helper()
	cache := filepath.Join(t.TempDir(), "cache")
	if err := os.MkdirAll(filepath.Join(cache, "sets/abc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cache, "sets/abc/edu.ko"), []byte("not really a module\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sets/abc", filepath.Join(cache, "current")); err != nil {
		t.Fatal(err)
	}
	return cache
}

func blkid(t *testing.T, img string) string {
	t.Helper()
	out, err := exec.Command("blkid", "-p", "-o", "export", img).CombinedOutput()
	if err != nil {
		t.Fatalf("blkid -p %s: %v\n%s", img, err, out)
	}
	return string(out)
}

func TestBuildXFSImage(t *testing.T) {
	const uuid = "0b9e3b1c-4f7a-4c55-9d2f-6a7c1e0d2b11"
	img := filepath.Join(t.TempDir(), "xfs.img")
	o := Options{Out: img, FSType: FSXFS, UUID: uuid, Init: rootInit(t), Extra: map[string]string{"/var/lib/kpreload/cache": stageCache(t)}}
	if err := Build(context.Background(), o); err != nil {
		t.Fatalf("Build(%+v): %v", o, err)
	}
	if st, err := os.Stat(img); err != nil || st.Size() != 300<<20 {
		t.Errorf("image size = %v (%v), want 300 MiB, xfs's smallest", st.Size(), err)
	}
	id := blkid(t, img)
	for _, want := range []string{"UUID=" + uuid, "LABEL=" + DefaultLabelXFS, "TYPE=xfs"} {
		if !strings.Contains(id, want+"\n") {
			t.Errorf("blkid -p = %q, want %s", id, want)
		}
	}
	if out, err := exec.Command(tool(t, "xfs_repair"), "-n", img).CombinedOutput(); err != nil {
		t.Errorf("xfs_repair -n: %v\n%s", err, out)
	}
	db := func(cmds ...string) string {
		args := []string{"-r"}
		for _, c := range cmds {
			args = append(args, "-c", c)
		}
		return run(t, "xfs_db", append(args, img)...)
	}
	for path, want := range map[string]string{"/sbin/init": "core.mode = 0100755", "/tmp": "core.mode = 041777", "/var/lib/kpreload/cache/sets/abc/edu.ko": "core.mode = 0100644",
		"/var/lib/kpreload/cache/current": "core.mode = 0120777"} {
		if got := db("path "+path, "print core.mode core.uid core.gid"); !strings.Contains(got, want+"\n") || !strings.Contains(got, "core.uid = 0\n") {
			t.Errorf("xfs_db %s: %q, want %s owned by root", path, got, want)
		}
	}
	if got := db("path /var/lib/kpreload/cache/sets/abc/edu.ko", "print core.size"); !strings.Contains(got, "core.size = 20\n") {
		t.Errorf("xfs_db edu.ko: %q, want its 20 bytes", got)
	}
	if got := db("path /var/lib/kpreload/cache/current", "print"); !regexp.MustCompile(`symlink = "sets/abc"`).MatchString(got) {
		t.Errorf("xfs_db current: %q, want a link to sets/abc", got)
	}
}

func TestBuildBtrfsImage(t *testing.T) {
	const uuid = "0b9e3b1c-4f7a-4c55-9d2f-6a7c1e0d2b11"
	dir := t.TempDir()
	img := filepath.Join(dir, "btrfs.img")
	o := Options{Out: img, FSType: FSBtrfs, UUID: uuid, Label: "kp-test", Init: rootInit(t), Extra: map[string]string{"/var/lib/kpreload/cache": stageCache(t)}}
	if err := Build(context.Background(), o); err != nil {
		t.Fatalf("Build(%+v): %v", o, err)
	}
	if st, err := os.Stat(img); err != nil || st.Size() != 128<<20 {
		t.Errorf("image size = %v (%v), want 128 MiB", st.Size(), err)
	}
	id := blkid(t, img)
	for _, want := range []string{"UUID=" + uuid, "LABEL=kp-test", "TYPE=btrfs"} {
		if !strings.Contains(id, want+"\n") {
			t.Errorf("blkid -p = %q, want %s", id, want)
		}
	}
	if out, err := exec.Command(tool(t, "btrfs"), "check", "--readonly", img).CombinedOutput(); err != nil {
		t.Errorf("btrfs check: %v\n%s", err, out)
	}
	// btrfs restore reads the files back without mounting anything.
	back := filepath.Join(dir, "restored")
	if err := os.Mkdir(back, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "btrfs", "restore", "-S", "-m", img, back)
	if b, err := os.ReadFile(filepath.Join(back, "var/lib/kpreload/cache/sets/abc/edu.ko")); err != nil || string(b) != "not really a module\n" {
		t.Errorf("restored edu.ko = %q (%v), want its contents", b, err)
	}
	if l, err := os.Readlink(filepath.Join(back, "var/lib/kpreload/cache/current")); err != nil || l != "sets/abc" {
		t.Errorf("restored link = %q (%v), want sets/abc", l, err)
	}
	if st, err := os.Stat(filepath.Join(back, "sbin/init")); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("restored /sbin/init: %v (%v), want mode 0755", st, err)
	}
}
