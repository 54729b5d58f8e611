package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// SyntheticModule compiles, with gcc and no kernel, a kernel module file
// named <name>.ko whose .modinfo section names it and the kernel it was
// built for (vermagic "<kernel> SMP preempt mod_unload modversions "): enough
// for modinfo, the module cache and a registry, not for the kernel to load.
func SyntheticModule(t testing.TB, name, kernel string) string {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatalf("gcc is needed to build a synthetic module: install it with scripts/deps.sh: %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "m.c")
	info := strings.Join([]string{"license=GPL", "name=" + name, "vermagic=" + kernel + " SMP preempt mod_unload modversions "}, `\000`)
	c := "int syn_init(void) { return 0; }\n" +
		`static const char modinfo[] __attribute__((section(".modinfo"), used, aligned(1))) = "` + info + "\";\n"
	if err := os.WriteFile(src, []byte(c), 0o644); err != nil {
		t.Fatal(err)
	}
	ko := filepath.Join(dir, name+".ko")
	if b, err := exec.Command(cc, "-c", "-O2", "-o", ko, src).CombinedOutput(); err != nil {
		t.Fatalf("compiling synthetic module %s: %v\n%s", name, err, b)
	}
	return ko
}
