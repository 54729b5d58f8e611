package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/kmodcache/names"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestNamesOnTheCommandLine: every flag and argument that names a driver,
// version, flavour or kernel release is checked against kmodcache/names
// before anything is read or written; the error names the flag and the
// value and says what is allowed.
func TestNamesOnTheCommandLine(t *testing.T) {
	const kernel = "6.1.0-56-cloud-amd64"
	ko := testenv.SyntheticModule(t, "syn_test", kernel)
	tests := []struct {
		name string
		args func(cache string) []string
		want string
	}{
		{"cache add --version ..", func(c string) []string {
			return []string{"cache", "add", "--cache", c, "--driver", "test", "--version", "..", ko}
		}, `--version ".." starts with '.'`},
		{"cache add --version up to etc", func(c string) []string {
			return []string{"cache", "add", "--cache", c, "--driver", "test", "--version", "../../../../etc", ko}
		}, `--version "../../../../etc" starts with '.'`},
		{"cache add --version as an option", func(c string) []string {
			return []string{"cache", "add", "--cache", c, "--driver", "test", "--version=-1", ko}
		}, `--version "-1" starts with '-'`},
		{"cache add --driver with dot dot", func(c string) []string {
			return []string{"cache", "add", "--cache", c, "--driver", "nvidia..x", "--version", "1.0", ko}
		}, `--driver "nvidia..x" holds ".."`},
		{"cache add --flavor with a slash", func(c string) []string {
			return []string{"cache", "add", "--cache", c, "--driver", "test", "--version", "1.0", "--flavor", "open/x", ko}
		}, `--flavor "open/x" holds '/'`},
		{"cache index --kernel up", func(c string) []string {
			return []string{"cache", "index", "--cache", c, "--kernel", "../../x"}
		}, `--kernel "../../x" starts with '.'`},
		{"switch VERSION up", func(c string) []string {
			return []string{"switch", "../../../../etc", "--dry-run", "--cache", c, "--kernel", kernel}
		}, `VERSION "../../../../etc" starts with '.'`},
		{"switch --kernel up", func(c string) []string {
			return []string{"switch", "1.0", "--dry-run", "--cache", c, "--kernel", "../" + kernel}
		}, `--kernel "../` + kernel + `" starts with '.'`},
		{"plan --kernel up", func(c string) []string {
			return []string{"plan", "--sysfs", c, "--cache", c, "--kernel", "../../x"}
		}, `--kernel "../../x" starts with '.'`},
		{"install --kernel up", func(c string) []string {
			return []string{"install", "--root", c, "--kernel", "../../x"}
		}, `--kernel "../../x" starts with '.'`},
		{"install --default up", func(c string) []string {
			return []string{"install", "--root", c, "--default", "../../x"}
		}, `--default "../../x" starts with '.'`},
		{"kernel-hook postinst KVER up", func(c string) []string {
			return []string{"kernel-hook", "postinst", "../../x", "--root", c}
		}, `kernel release "../../x" starts with '.'`},
		{"build --kernel up", func(c string) []string {
			return []string{"build", "--recipes", recipesDir, "--cache", c, "--kernel", "6.1.0/../../x", "testdriver"}
		}, `--kernel "6.1.0/../../x" holds ".."`},
		{"build RECIPE:KVER up", func(c string) []string {
			return []string{"build", "--recipes", recipesDir, "--cache", c, "testdriver:6.1..0-cloud-amd64"}
		}, `testdriver:KVER "6.1..0-cloud-amd64" holds ".."`},
		{"initramfs --kernel up", func(c string) []string {
			return []string{"initramfs", "--kernel", "../../x", "--modules-dir", c, "--init", ko, "-o", filepath.Join(c, "initrd")}
		}, `kernel release "../../x" starts with '.'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cache := t.TempDir()
			code, out, errOut := runCLI(tt.args(cache)...)
			if code == 0 {
				t.Fatalf("exit 0, want 1; stdout:\n%s", out)
			}
			for _, want := range []string{tt.want, names.Allowed} {
				if !strings.Contains(errOut, want) {
					t.Errorf("stderr %q does not say %s", errOut, want)
				}
			}
			// Nothing was written: no set, no index, no initramfs.
			var left []string
			filepath.Walk(cache, func(p string, fi os.FileInfo, err error) error {
				if err == nil && !fi.IsDir() {
					left = append(left, p)
				}
				return nil
			})
			if len(left) > 0 {
				t.Errorf("the command wrote %v", left)
			}
		})
	}
}
