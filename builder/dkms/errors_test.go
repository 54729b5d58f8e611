package dkms

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// Logs captured from real builds of recipes/testdriver (paths shortened).
const (
	gccErrorLog = `DKMS make.log for kpreload-edu-1.0.0 for kernel 6.1.0-56-cloud-amd64 (x86_64)
Sun Nov 22 10:28:00 UTC 2026
make: Entering directory '/w/kernel'
  CC [M]  /w/dkms/kpreload-edu/1.0.0/build/kpreload_edu.o
/w/dkms/kpreload-edu/1.0.0/build/kpreload_edu.c: In function 'kpreload_edu_probe':
/w/dkms/kpreload-edu/1.0.0/build/kpreload_edu.c:80:51: error: expected ';' before 'if'
   80 |         edu->id = ioread32(edu->bar0 + EDU_REG_ID)
      |                                                   ^
      |                                                   ;
   81 |         if ((edu->id & 0xff) != EDU_ID_MAGIC) {
      |         ~~
/w/dkms/kpreload-edu/1.0.0/build/kpreload_edu.c:92:1: warning: label 'err_unmap' defined but not used [-Wunused-label]
   92 | err_unmap:
      | ^~~~~~~~~
/w/dkms/kpreload-edu/1.0.0/build/kpreload_edu.c:99:9: error: 'foo' undeclared (first use in this function)
make[2]: *** [/k/usr/src/linux-headers-6.1.0-56-common/scripts/Makefile.build:255: /w/dkms/kpreload-edu/1.0.0/build/kpreload_edu.o] Error 1
make[1]: *** [/k/usr/src/linux-headers-6.1.0-56-common/Makefile:2065: /w/dkms/kpreload-edu/1.0.0/build] Error 2
make: Leaving directory '/w/kernel'
`
	fatalErrorLog = `  CC [M]  /w/build/kpreload_edu.o
/w/build/kpreload_edu.c:16:10: fatal error: linux/nonexistent.h: No such file or directory
   16 | #include <linux/nonexistent.h>
compilation terminated.
make[2]: *** [scripts/Makefile.build:255: /w/build/kpreload_edu.o] Error 1
`
	modpostLog = `  MODPOST /w/build/Module.symvers
ERROR: modpost: "kpreload_missing_symbol" [/w/build/kpreload_edu.ko] undefined!
make[2]: *** [scripts/Makefile.modpost:126: /w/build/Module.symvers] Error 1
`
	paholeLog = `  BTF [M] /w/build/kpreload_edu.ko
/bin/sh: 1: pahole: not found
make[2]: *** [/k/scripts/Makefile.modfinal:64: /w/build/kpreload_edu.ko] Error 127
make[2]: *** Deleting file '/w/build/kpreload_edu.ko'
`
	dkmsOutput = `Sign command: /w/signing-disabled/sign-file
Binary /w/signing-disabled/sign-file not found, modules won't be signed
Error! Your kernel headers for kernel 6.1.0-56-cloud-amd64 cannot be found at /lib/modules/6.1.0-56-cloud-amd64/build or /lib/modules/6.1.0-56-cloud-amd64/source.
Please install the linux-headers-6.1.0-56-cloud-amd64 package or use the --kernelsourcedir option to tell DKMS where it's located.
`
	cleanLog = `make: Entering directory '/w/kernel'
  CC [M]  /w/build/kpreload_edu.o
  LD [M]  /w/build/kpreload_edu.ko
make: Leaving directory '/w/kernel'
`
)

func TestFirstError(t *testing.T) {
	tests := []struct {
		name, log, want string
	}{
		{"gcc error, before later warnings and errors", gccErrorLog,
			"/w/dkms/kpreload-edu/1.0.0/build/kpreload_edu.c:80:51: error: expected ';' before 'if'"},
		{"gcc fatal error", fatalErrorLog,
			"/w/build/kpreload_edu.c:16:10: fatal error: linux/nonexistent.h: No such file or directory"},
		{"modpost", modpostLog,
			`ERROR: modpost: "kpreload_missing_symbol" [/w/build/kpreload_edu.ko] undefined!`},
		{"make only", paholeLog,
			"make[2]: *** [/k/scripts/Makefile.modfinal:64: /w/build/kpreload_edu.ko] Error 127"},
		{"dkms", dkmsOutput,
			"Error! Your kernel headers for kernel 6.1.0-56-cloud-amd64 cannot be found at /lib/modules/6.1.0-56-cloud-amd64/build or /lib/modules/6.1.0-56-cloud-amd64/source."},
		{"clean build", cleanLog, ""},
		{"empty", "", ""},
		{"crlf and indentation", "  x.c:1:1: error: boom\r\n", "x.c:1:1: error: boom"},
		{"no trailing newline", "a\nb.c:2:3: error: last", "b.c:2:3: error: last"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FirstError(tt.log); got != tt.want {
				t.Errorf("FirstError(%q) = %q, want %q", tt.log, got, tt.want)
			}
		})
	}
}

func TestBuildErrorMessage(t *testing.T) {
	exitErr := exec.Command("false").Run()
	e := &BuildError{
		Name: "kpreload-edu", Version: "1.0.0", Kernel: "6.1.0-56-cloud-amd64", ExitCode: 10,
		LogPath: "/w/make.log", FirstError: "x.c:1:1: error: boom", Err: exitErr,
	}
	want := "dkms build of kpreload-edu/1.0.0 for kernel 6.1.0-56-cloud-amd64 failed: exit status 1: x.c:1:1: error: boom (log: /w/make.log)"
	if got := e.Error(); got != want {
		t.Errorf("BuildError.Error() = %q, want %q", got, want)
	}
	var ee *exec.ExitError
	if !errors.As(e, &ee) {
		t.Errorf("errors.As(BuildError, *exec.ExitError) = false, want true")
	}
	excluded := &BuildError{Name: "n", Version: "v", Kernel: "k", ExitCode: 77, Err: ErrBuildExclusive}
	if !errors.Is(excluded, ErrBuildExclusive) || !strings.Contains(excluded.Error(), "BUILD_EXCLUSIVE") {
		t.Errorf("BuildError{Err: ErrBuildExclusive} = %q, Is(ErrBuildExclusive) = %v; want true and a BUILD_EXCLUSIVE message", excluded.Error(), errors.Is(excluded, ErrBuildExclusive))
	}
}
