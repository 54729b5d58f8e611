package rootdiskcmd

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/rootdisk"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestRootdiskHelpExamples runs every example of `kpreload rootdisk --help`
// exactly as written (in an empty directory, with ./cache made for --add, and
// $KPRELOAD_SRC naming the source tree, as a user outside it sets it) and
// checks each image with blkid: the filesystem type the example asked for.
func TestRootdiskHelpExamples(t *testing.T) {
	code, help, _ := runCLI("rootdisk", "--help")
	if code != 0 {
		t.Fatalf("rootdisk --help: exit %d", code)
	}
	_, ex, ok := strings.Cut(help, "Examples:\n")
	if !ok {
		t.Fatalf("rootdisk --help has no Examples:\n%s", help)
	}
	ex, _, _ = strings.Cut(ex, "\n\n")
	// Outside the source tree, and with a -trimpath test binary (make test's),
	// nothing else tells the examples where the root init's source is.
	t.Setenv(rootdisk.SourceEnv, testenv.RepoRoot(t))
	t.Chdir(t.TempDir())
	if err := os.MkdirAll("cache/sets", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("cache/sets/x.json", []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fstypes := map[string]bool{}
	for _, line := range strings.Split(ex, "\n") {
		args := strings.Fields(line)
		if len(args) < 2 || args[0] != "kpreload" || args[1] != "rootdisk" {
			t.Fatalf("example %q is not a kpreload rootdisk command", line)
		}
		code, out, errOut := runCLI(args[1:]...)
		if code != 0 {
			t.Errorf("example %q: exit %d: %s", line, code, errOut)
			continue
		}
		img, want := "", "ext4"
		for i, a := range args {
			switch a {
			case "-o":
				img = args[i+1]
			case "--fstype":
				want = args[i+1]
			}
		}
		fstypes[want] = true
		if !strings.HasPrefix(out, img+": "+want+", ") {
			t.Errorf("example %q printed %q, want it to start %q", line, out, img+": "+want+", ")
		}
		id, err := exec.Command("blkid", "-p", "-o", "value", "-s", "TYPE", filepath.Clean(img)).Output()
		if got := strings.TrimSpace(string(id)); err != nil || got != want {
			t.Errorf("example %q: blkid says %q (%v), want %s", line, got, err, want)
		}
	}
	if !fstypes["ext4"] || !fstypes["xfs"] {
		t.Errorf("the examples make %v, want ext4 and xfs among them", fstypes)
	}
}

func TestRootdiskRejectsBadFSType(t *testing.T) {
	code, _, errOut := runCLI("rootdisk", "-o", filepath.Join(t.TempDir(), "x.img"), "--fstype", "zfs", "--init", "/bin/true")
	if want := `filesystem "zfs": want one of ext4, xfs, btrfs`; code == 0 || !strings.Contains(errOut, want) {
		t.Errorf("rootdisk --fstype zfs = exit %d, stderr %q, want failure saying %q", code, errOut, want)
	}
}

func TestParseSizeMB(t *testing.T) {
	tests := []struct {
		in   string
		want int
		ok   bool
	}{
		{"64", 64, true}, {"64M", 64, true}, {"64MiB", 64, true}, {"64mb", 64, true},
		{"1G", 1024, true}, {"2GiB", 2048, true}, {"", 0, false}, {"64K", 0, false}, {"-1", 0, false}, {"big", 0, false},
	}
	for _, tt := range tests {
		got, err := parseSizeMB(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseSizeMB(%q) = %d, %v, want %d, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestParseAdds(t *testing.T) {
	got, err := parseAdds([]string{"/var/lib/kpreload/cache=./cache", "/opt=/x=y"})
	want := map[string]string{"/var/lib/kpreload/cache": "./cache", "/opt": "/x=y"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("parseAdds = %v, %v, want %v", got, err, want)
	}
	for _, bad := range []string{"nodest", "=src", "/dest="} {
		if _, err := parseAdds([]string{bad}); err == nil {
			t.Errorf("parseAdds(%q) = nil error, want one", bad)
		}
	}
}
