package dkms

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

func TestInspectHeaders(t *testing.T) {
	tests := []struct {
		kver, cc string
		btf      bool
	}{
		// 6.1 headers ship no vmlinux, so kbuild skips module BTF.
		{testKernels[0], "gcc-12", false},
		{testKernels[1], "x86_64-linux-gnu-gcc-12", true},
	}
	for _, tt := range tests {
		t.Run(tt.kver, func(t *testing.T) {
			dir := headersDir(t, tt.kver)
			h, err := InspectHeaders(dir)
			if err != nil {
				t.Fatalf("InspectHeaders(%s): %v", dir, err)
			}
			root := testenv.KernelTree(t, tt.kver)
			if h.Release != tt.kver || h.CC != tt.cc || h.BTFModules != tt.btf || h.Root != root {
				t.Errorf("InspectHeaders(%s) = release %q cc %q btf %v root %q, want %q %q %v %q", dir, h.Release, h.CC, h.BTFModules, h.Root, tt.kver, tt.cc, tt.btf, root)
			}
			if !strings.Contains(h.CCVersionText, "12.2.0") {
				t.Errorf("InspectHeaders(%s).CCVersionText = %q, want gcc 12.2.0", dir, h.CCVersionText)
			}
			// Debian's Makefile includes the -common headers by absolute path,
			// which must be mapped into the unpacked root.
			if len(h.Includes) != 1 || !h.needsShadow() {
				t.Fatalf("InspectHeaders(%s).Includes = %v, want one include mapped into %s", dir, h.Includes, root)
			}
			for from, to := range h.Includes {
				if !strings.HasPrefix(from, "/usr/src/linux-headers-") || to != filepath.Join(root, from) {
					t.Errorf("include %s -> %s, want it mapped to %s", from, to, filepath.Join(root, from))
				}
			}

			dst := filepath.Join(t.TempDir(), "kernel")
			if err := h.shadow(dst, root); err != nil {
				t.Fatalf("shadow: %v", err)
			}
			mk, err := os.ReadFile(filepath.Join(dst, "Makefile"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(mk), "include "+SandboxKernel+"/usr/src/linux-headers-") {
				t.Errorf("shadow Makefile = %q, want an include of the -common Makefile as the sandbox mounts it", mk)
			}
			// Every entry links to the headers as mounted in the sandbox, and
			// the relative scripts link into linux-kbuild resolves there.
			for _, rel := range []string{"scripts", ".config", "include", "Module.symvers"} {
				target, err := os.Readlink(filepath.Join(dst, rel))
				if err != nil {
					t.Fatalf("shadow %s: %v", rel, err)
				}
				if !strings.HasPrefix(target, SandboxKernel+"/") {
					t.Errorf("shadow %s -> %s, want a link into %s", rel, target, SandboxKernel)
				}
			}
			for _, rel := range []string{"scripts/mod/modpost", "scripts/basic/fixdep", "include/generated/utsrelease.h"} {
				target, _ := os.Readlink(filepath.Join(dst, strings.SplitN(rel, "/", 2)[0]))
				onHost := filepath.Join(root, strings.TrimPrefix(target, SandboxKernel), strings.SplitN(rel, "/", 2)[1])
				if _, err := os.Stat(onHost); err != nil {
					t.Errorf("shadow %s does not resolve in the unpacked kernel: %v", rel, err)
				}
			}
		})
	}
}

func TestInspectHeadersMissingInclude(t *testing.T) {
	// A copy of the 6.1 headers' top files in a root without the -common tree.
	src := headersDir(t, testKernels[0])
	dir := filepath.Join(t.TempDir(), "usr", "src", "linux-headers-"+testKernels[0])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"Makefile", ".config", "Module.symvers"} {
		data, err := os.ReadFile(filepath.Join(src, rel))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, rel), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, rel := range []string{"include", "scripts"} {
		if err := os.Symlink(filepath.Join(src, rel), filepath.Join(dir, rel)); err != nil {
			t.Fatal(err)
		}
	}
	_, err := InspectHeaders(dir)
	if err == nil || !strings.Contains(err.Error(), "Makefile includes /usr/src/linux-headers-6.1.0-56-common/Makefile") {
		t.Errorf("InspectHeaders(headers without -common) error = %v, want one naming the missing include", err)
	}
}

func TestReplaceWord(t *testing.T) {
	tests := []struct{ line, word, with, want string }{
		{"include /usr/src/a/Makefile\n", "/usr/src/a/Makefile", "/r/usr/src/a/Makefile", "include /r/usr/src/a/Makefile\n"},
		{"include\t/usr/src/a/Makefile", "/usr/src/a/Makefile", "/r/x", "include\t/r/x"},
		{"include /usr/src/a/Makefile.old\n", "/usr/src/a/Makefile", "/r/x", "include /usr/src/a/Makefile.old\n"},
		{"-include /a /b\n", "/a", "/r/a", "-include /r/a /b\n"},
	}
	for _, tt := range tests {
		if got := replaceWord(tt.line, tt.word, tt.with); got != tt.want {
			t.Errorf("replaceWord(%q, %q, %q) = %q, want %q", tt.line, tt.word, tt.with, got, tt.want)
		}
	}
}
