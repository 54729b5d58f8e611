package cli

import (
	"bytes"
	"strings"
	"testing"
)

// TestRemoteFlags: every command that talks to a registry takes the
// timeouts, and refuses one that is not positive.
func TestRemoteFlags(t *testing.T) {
	root := NewRoot()
	for _, path := range [][]string{{"build"}, {"image", "build"}, {"cache", "push"}, {"cache", "pull"}} {
		cmd, _, err := root.Find(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, flag := range []struct{ name, def string }{
			{"timeout", "10m0s"}, {"connect-timeout", "10s"}, {"first-byte-timeout", "30s"}, {"idle-timeout", "30s"},
		} {
			f := cmd.Flags().Lookup(flag.name)
			if f == nil || f.DefValue != flag.def {
				t.Errorf("kpreload %s --%s = %+v, want default %s", strings.Join(path, " "), flag.name, f, flag.def)
			}
		}
	}
	for _, tc := range []struct{ args, want string }{
		{"--timeout 0s", "--timeout 0s: want a positive duration"},
		{"--idle-timeout -1s", "--idle-timeout -1s: want a positive duration"},
	} {
		var out, errb bytes.Buffer
		args := append([]string{"cache", "pull", "--cache", t.TempDir(), "--remote", "oci://127.0.0.1:1/x", "--plain-http"}, strings.Fields(tc.args)...)
		if code := Execute(args, &out, &errb); code == 0 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("cache pull %s = exit %d, %q; want non-zero and %q", tc.args, code, errb.String(), tc.want)
		}
	}
}
