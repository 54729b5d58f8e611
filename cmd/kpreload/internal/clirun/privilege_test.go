package clirun

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/cobra"
)

// TestPrivilegeOfWriters: a command that writes the cache or an output
// file needs root only where this process cannot write (as root, never).
func TestPrivilegeOfWriters(t *testing.T) {
	dir := t.TempDir()
	readOnly := filepath.Join(dir, "ro")
	if err := os.Mkdir(readOnly, 0o555); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		flags map[string]string
		p     privilege
		need  bool
	}{
		{"cache, writable", map[string]string{"cache": filepath.Join(dir, "new/cache")}, cacheWriter, false},
		{"cache, read-only", map[string]string{"cache": filepath.Join(readOnly, "cache")}, cacheWriter, true},
		{"stdout", nil, outputWriter(""), false},
		{"-o -", map[string]string{"output": "-"}, outputWriter(""), false},
		{"-o writable", map[string]string{"output": filepath.Join(dir, "spec.yaml")}, outputWriter(""), false},
		{"-o read-only", map[string]string{"output": filepath.Join(readOnly, "spec.yaml")}, outputWriter(""), true},
		{"default under --root", map[string]string{"root": readOnly}, outputWriter("/etc/cdi/kpreload.yaml"), true},
		{"default under a writable --root", map[string]string{"root": dir}, outputWriter("/etc/cdi/kpreload.yaml"), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &cobra.Command{Use: "x"}
			c.Flags().String("cache", "", "")
			c.Flags().StringP("output", "o", "", "")
			c.Flags().String("root", "/", "")
			for k, v := range tt.flags {
				if err := c.Flags().Set(k, v); err != nil {
					t.Fatal(err)
				}
			}
			want := tt.need && os.Geteuid() != 0
			if need, why := tt.p(c); need != want || need && why == "" {
				t.Errorf("privilege = %v, %q; want %v", need, why, want)
			}
		})
	}
}
