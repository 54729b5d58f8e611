package modinfo

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

// Test kernels, as scripts/lib.sh sets them: one with plain .ko files and one
// with .ko.xz. KPRELOAD_KERNELS (space-separated) overrides them.
var defaultKernels = []string{"6.1.0-56-cloud-amd64", "6.12.117+deb12-cloud-amd64"}

// testKernels returns the kernel versions the tests read modules from.
func testKernels() []string {
	if v := strings.Fields(os.Getenv("KPRELOAD_KERNELS")); len(v) > 0 {
		return v
	}
	return defaultKernels
}

// moduleDir returns lib/modules/<kver> of the unpacked kernel kver under
// $KPRELOAD_CACHE/kernels (testenv.KernelTree unpacks it through
// scripts/kernels.sh when absent, or fails the test).
func moduleDir(t testing.TB, kver string) string {
	t.Helper()
	return filepath.Join(testenv.KernelTree(t, kver), "lib", "modules", kver)
}

// findModule returns the file of module stem (a path under lib/modules/<kver>
// without extension, e.g. "kernel/lib/crc7") in any compression.
func findModule(t testing.TB, kver, stem string) string {
	t.Helper()
	dir := moduleDir(t, kver)
	for _, ext := range []string{".ko", ".ko.xz", ".ko.zst", ".ko.gz"} {
		p := filepath.Join(dir, stem+ext)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatalf("module %s not found in %s: is the kernel tree complete? run scripts/deps.sh", stem, dir)
	return ""
}

// tool returns the path of an external program, failing the test when it is missing.
func tool(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatalf("%s is not installed: run scripts/deps.sh", name)
	return ""
}

// run runs a program and returns its standard output, failing the test on error.
func run(t testing.TB, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(tool(t, name), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// lines splits program output into lines, dropping the final newline; no
// output gives nil.
func lines(out []byte) []string {
	s := strings.TrimSuffix(string(out), "\n")
	if s == "" && len(out) == 0 {
		return nil
	}
	return strings.Split(s, "\n")
}

// kmodField returns kmod's `modinfo -F field file`, one value per line.
func kmodField(t testing.TB, field, file string) []string {
	t.Helper()
	return lines(run(t, "modinfo", "-F", field, file))
}

// kmodFields returns every field of kmod's `modinfo -0 file` (key=value
// entries ended by NUL, after the filename), values in order by key: what
// `modinfo -F key file` prints, one value per line, for each key (parm and
// parmtype, which kmod merges, aside).
func kmodFields(t testing.TB, file string) map[string][]string {
	t.Helper()
	out := run(t, "modinfo", "-0", file)
	entries := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if len(entries) == 0 || !strings.HasPrefix(entries[0], "filename:") {
		t.Fatalf("modinfo -0 %s: output does not start with its filename: %q", file, out)
	}
	fields := map[string][]string{}
	for _, e := range entries[1:] {
		if strings.HasPrefix(e, "parm:") {
			continue // parm and parmtype merged, in the padded "key: value" form
		}
		key, value, ok := strings.Cut(e, "=")
		if !ok {
			t.Fatalf("modinfo -0 %s: entry %q is not key=value", file, e)
		}
		fields[key] = append(fields[key], value)
	}
	return fields
}

// kmodVersions returns kmod's `modprobe --dump-modversions file` as symbols.
func kmodVersions(t testing.TB, file string) []Symbol {
	t.Helper()
	var syms []Symbol
	for _, l := range lines(run(t, "modprobe", "--dump-modversions", file)) {
		crc, name, ok := strings.Cut(l, "\t")
		if !ok {
			t.Fatalf("modprobe --dump-modversions %s: unexpected line %q", file, l)
		}
		v, err := strconv.ParseUint(strings.TrimPrefix(crc, "0x"), 16, 64)
		if err != nil {
			t.Fatalf("modprobe --dump-modversions %s: bad CRC in %q: %v", file, l, err)
		}
		syms = append(syms, Symbol{Name: name, CRC: v})
	}
	return syms
}

// equalStrings compares two string lists, treating nil and empty alike.
func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// oneOrEmpty turns kmod's -F output for a single-valued field into a string.
func oneOrEmpty(t testing.TB, field string, vals []string) string {
	t.Helper()
	switch len(vals) {
	case 0:
		return ""
	case 1:
		return vals[0]
	}
	t.Fatalf("modinfo -F %s printed %d values, want at most 1: %q", field, len(vals), vals)
	return ""
}

// checkAgainstKmod compares info with what kmod's modinfo and modprobe
// --dump-modversions say about file (the same module, usually the same file).
func checkAgainstKmod(t *testing.T, file string, info *Info) {
	t.Helper()
	if info.File != file {
		t.Logf("comparing %s with kmod's reading of %s", info.File, file)
	}
	// kmod is asked once for every field (modinfo -0): every modinfo run of
	// a .ko.xz decompresses the whole module.
	all := kmodFields(t, file)
	askKmod := func(_ testing.TB, field, _ string) []string { return all[field] }
	for _, c := range []struct {
		field string
		got   string
	}{
		{"name", info.Name},
		{"vermagic", info.Vermagic},
		{"srcversion", info.Srcversion},
		{"version", info.Version},
		{"license", info.License},
		{"description", info.Description},
	} {
		if want := oneOrEmpty(t, c.field, askKmod(t, c.field, file)); c.got != want {
			t.Errorf("ReadFile(%q) %s = %q, want %q (modinfo -F %s)", info.File, c.field, c.got, want, c.field)
		}
	}
	for _, c := range []struct {
		field string
		got   []string
	}{
		{"alias", info.Aliases},
		{"softdep", info.Softdeps},
		{"firmware", info.Firmware},
	} {
		if want := askKmod(t, c.field, file); !equalStrings(c.got, want) {
			t.Errorf("ReadFile(%q) %s = %q, want %q (modinfo -F %s)", info.File, c.field, c.got, want, c.field)
		}
	}
	var wantDeps []string
	for _, l := range askKmod(t, "depends", file) {
		for d := range strings.SplitSeq(l, ",") {
			if d != "" {
				wantDeps = append(wantDeps, d)
			}
		}
	}
	if !equalStrings(info.Depends, wantDeps) || (wantDeps == nil) != (info.Depends == nil) {
		t.Errorf("ReadFile(%q) depends = %#v, want %#v (modinfo -F depends)", info.File, info.Depends, wantDeps)
	}
	// Every raw key, except parm/parmtype, which kmod merges into one "parm".
	for _, key := range info.Keys {
		if key == "parm" || key == "parmtype" {
			continue
		}
		if want := askKmod(t, key, file); !equalStrings(info.Fields[key], want) {
			t.Errorf("ReadFile(%q) Fields[%q] = %q, want %q (modinfo -F %s)", info.File, key, info.Fields[key], want, key)
		}
	}
	if len(info.Keys) != len(info.Fields) {
		t.Errorf("ReadFile(%q): %d Keys but %d Fields", file, len(info.Keys), len(info.Fields))
	}
	want := kmodVersions(t, file)
	if len(info.Versions) != len(want) {
		t.Errorf("ReadFile(%q): %d versions, want %d (modprobe --dump-modversions)", file, len(info.Versions), len(want))
	} else {
		for i := range want {
			if info.Versions[i] != want[i] {
				t.Errorf("ReadFile(%q) Versions[%d] = %+v, want %+v", info.File, i, info.Versions[i], want[i])
			}
		}
	}
}

// decompressCLI returns the uncompressed image of file using the real xz,
// zstd or gzip program picked by extension: an oracle independent of Decompress.
func decompressCLI(t testing.TB, file string) []byte {
	t.Helper()
	switch {
	case strings.HasSuffix(file, ".xz"):
		return run(t, "xz", "-dc", file)
	case strings.HasSuffix(file, ".zst"):
		return run(t, "zstd", "-dcq", file)
	case strings.HasSuffix(file, ".gz"):
		return run(t, "gzip", "-dc", file)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// stripSignature returns image without its appended signature, computed from
// the trailer as scripts/extract-module-sig.pl does: magic, then struct
// module_signature whose last four bytes are the big-endian signature length.
func stripSignature(t testing.TB, image []byte) []byte {
	t.Helper()
	const magic = "~Module signature appended~\n"
	if !bytes.HasSuffix(image, []byte(magic)) {
		t.Fatalf("image has no signature to strip")
	}
	end := len(image) - len(magic)
	sigLen := int(image[end-4])<<24 | int(image[end-3])<<16 | int(image[end-2])<<8 | int(image[end-1])
	n := end - 12 - sigLen
	if n <= 0 {
		t.Fatalf("signature length %d does not fit in %d bytes", sigLen, len(image))
	}
	return image[:n]
}

// writeFile writes data to dir/name and returns the path.
func writeFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// describe summarises an error for test messages.
func describe(err error) string {
	if err == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%q", err.Error())
}
