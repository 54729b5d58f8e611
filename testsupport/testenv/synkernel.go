package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// SyntheticKernel writes, under downloads/kernels/<release>, a kernel as
// builder/archive leaves an unpacked one (its .complete marker) with a
// headers tree enough for dkms.InspectHeaders and a build's cache key:
// utsrelease.h naming release, a .config (not built with gcc, so no
// compiler is asked), an empty Module.symvers, fixdep and modpost stubs and
// a Makefile that includes nothing. No network, no compiler: the builder's
// tests and benchmarks run a matrix of any size over such kernels with a
// fake dkms. It returns the kernel's directory.
func SyntheticKernel(t testing.TB, downloads, release string) string {
	t.Helper()
	dir := filepath.Join(downloads, "kernels", release)
	headers := filepath.Join(dir, "usr", "src", "linux-headers-"+release)
	files := map[string]string{
		"include/generated/utsrelease.h": "#define UTS_RELEASE \"" + release + "\"\n",
		".config":                        "CONFIG_MODULES=y\nCONFIG_LOCALVERSION=\"-synthetic\"\n",
		"Module.symvers":                 "",
		"scripts/basic/fixdep":           "#!/bin/sh\n",
		"scripts/mod/modpost":            "#!/bin/sh\n",
		"Makefile":                       "# synthetic kernel headers\n",
	}
	for rel, text := range files {
		p := filepath.Join(headers, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ".complete"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
