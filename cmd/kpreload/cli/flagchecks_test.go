package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestFlagChecks: each command's validate refuses flags that do not go
// together, before it reads or writes anything, saying which.
func TestFlagChecks(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"build", "testdriver", "--pull-only"}, "--pull-only and --retry-failed need --remote"},
		{[]string{"build", "testdriver", "--fetch-only", "--remote", "oci://127.0.0.1:1/x"}, "--fetch-only prepares this machine only"},
		{[]string{"build", "--report"}, "--report reads the registry"},
		{[]string{"build", "testdriver", "--shard", "3/2"}, "shard 3/2: want 1 <= I <= N"},
		{[]string{"follow", "--remote", "oci://127.0.0.1:1/x"}, "follow pushes signed cells"},
		{[]string{"follow", "--remote", "oci://127.0.0.1:1/x", "--sign", "k", "--new-exit-code", "200"}, "--new-exit-code 200: want 0..125"},
		{[]string{"user-data", "apply", "--sysfs", dir}, "only with --dry-run"},
		{[]string{"user-data", "apply", "--dry-run", "--kernel", "../x"}, "--kernel"},
		{[]string{"initramfs", "-o", out}, "--kernel is required"},
		{[]string{"initramfs", "--kernel", "6.1.0-56-cloud-amd64"}, "-o/--output is required"},
		{[]string{"initramfs", "--kernel", "6.1.0-56-cloud-amd64", "-o", out, "--compression", "bz2"}, "bz2"},
		{[]string{"initramfs", "--kernel", "6.1.0-56-cloud-amd64", "-o", out, "--init", filepath.Join(dir, "absent")}, "/init binary"},
		{[]string{"kernels", "fetch", "--suite", "no-such-suite", "6.1.0-56-cloud-amd64"}, "no-such-suite"},
		{[]string{"kernels", "fetch"}, "name at least one kernel release"},
		{[]string{"keys", "export", "--cache", dir}, "-o FILE is required"},
		{[]string{"keys", "export", "--cache", dir, "-o", out, "--format", "txt"}, `--format "txt": want der or pem`},
		{[]string{"switch", "550", "--sysfs", dir}, "only with --dry-run"},
		{[]string{"switch", "550", "--flavor", "closed", "--dry-run"}, "--flavor"},
		{[]string{"rootdisk"}, "-o/--output is required"},
		{[]string{"rootdisk", "-o", out, "--size", "lots"}, "lots"},
		{[]string{"rootdisk", "-o", out, "--add", "nosrc"}, "nosrc"},
		{[]string{"cache", "pull", "--cache", dir}, "--remote"},
	} {
		code, stdout, stderr := runCLI(tt.args...)
		if code == 0 || !strings.Contains(stderr, tt.want) {
			t.Errorf("kpreload %q = exit %d, stdout %q, stderr %q; want a failure saying %q", tt.args, code, stdout, stderr, tt.want)
		}
	}
}
