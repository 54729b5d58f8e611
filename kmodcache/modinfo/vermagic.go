package modinfo

import (
	"fmt"
	"strings"
)

// VermagicRelease returns the kernel release a vermagic string names (its
// first word), or "" when it names none.
func VermagicRelease(vermagic string) string {
	if f := strings.Fields(vermagic); len(f) > 0 {
		return f[0]
	}
	return ""
}

// CheckVermagic returns why a module with vermagic vm cannot load on a kernel with
// the given release and full vermagic (which may be empty), or "" if it can.
// Whitespace between and around the words is not significant.
func CheckVermagic(vm, release, kernelVermagic string) string {
	f := strings.Fields(vm)
	if len(f) == 0 {
		return "module has no vermagic"
	}
	if f[0] != release {
		return fmt.Sprintf("vermagic mismatch: built for kernel %s, running %s", f[0], release)
	}
	if kernelVermagic != "" && strings.Join(f, " ") != strings.Join(strings.Fields(kernelVermagic), " ") {
		return fmt.Sprintf("vermagic mismatch: module %q, kernel %q", strings.TrimSpace(vm), strings.TrimSpace(kernelVermagic))
	}
	return ""
}
