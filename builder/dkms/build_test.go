package dkms

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// build runs one real dkms build of src for kver in a fresh WorkDir and
// checks that the system's dkms and module trees were left alone.
func build(t *testing.T, src, kver string, mutate func(*BuildRequest)) (*BuildResult, error) {
	t.Helper()
	req := BuildRequest{
		SourceDir:       src,
		Kernel:          kver,
		KernelSourceDir: headersDir(t, kver),
		WorkDir:         filepath.Join(t.TempDir(), "work"),
		Jobs:            2,
	}
	if mutate != nil {
		mutate(&req)
	}
	before := snapshotSystem(t)
	res, err := New().Build(context.Background(), req)
	checkUntouched(t, before)
	return res, err
}

// TestBuildTestDriver builds recipes/testdriver with the real dkms for every
// test kernel, as v1.0.0 (its dkms.conf) and as v2.0.0 (an edited copy).
// The v2.0.0 build for the last test kernel is TestBuildUsesCC's, which
// makes the same checks of it.
func TestBuildTestDriver(t *testing.T) {
	requireTools(t)
	for _, kver := range testKernels {
		t.Run(kver, func(t *testing.T) {
			for _, version := range []string{"1.0.0", "2.0.0"} {
				if version == "2.0.0" && kver == ccKernel {
					continue
				}
				src := testDriverDir(t)
				if version != "1.0.0" {
					src = testDriverVersion(t, version)
				}
				res, err := build(t, src, kver, nil)
				if err != nil {
					t.Fatalf("Build(testdriver %s, %s): %v", version, kver, err)
				}
				t.Logf("built kpreload-edu %s for %s in %v with %s: %v", version, kver, res.Duration.Round(time.Millisecond), res.CC, res.Modules)
				checkTestDriver(t, res, kver, version)
				if version == "1.0.0" && len(res.Modules) == 1 {
					keepPlainBuild(t, kver, res.Modules[0])
				}
			}
		})
	}
}

// testDriverVersion returns a copy of recipes/testdriver whose dkms.conf
// says version.
func testDriverVersion(t *testing.T, version string) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "src")
	copyTree(t, testDriverDir(t), src)
	editFile(t, filepath.Join(src, "dkms.conf"), `PACKAGE_VERSION="1.0.0"`, `PACKAGE_VERSION="`+version+`"`)
	return src
}

// plainBuilds holds, per kernel, the module of TestBuildTestDriver's build
// of recipes/testdriver as it is, in a fresh WorkDir <temp>/work:
// TestBuildReproducible's first build, which it compares with a build in a
// deeper work directory, instead of running the same dkms build again.
var plainBuilds sync.Map // kver -> []byte

// keepPlainBuild keeps the module a plain build of the test driver for kver made.
func keepPlainBuild(t *testing.T, kver, ko string) {
	t.Helper()
	b, err := os.ReadFile(ko)
	if err != nil {
		t.Fatal(err)
	}
	plainBuilds.Store(kver, b)
}

func checkTestDriver(t *testing.T, res *BuildResult, kver, version string) {
	t.Helper()
	if res.Name != "kpreload-edu" || res.Version != version || res.Kernel != kver {
		t.Errorf("BuildResult name/version/kernel = %s/%s/%s, want kpreload-edu/%s/%s", res.Name, res.Version, res.Kernel, version, kver)
	}
	if len(res.Modules) != 1 || filepath.Base(res.Modules[0]) != "kpreload_edu.ko" {
		t.Fatalf("BuildResult.Modules = %v, want one kpreload_edu.ko", res.Modules)
	}
	ko := res.Modules[0]
	if !filepath.IsAbs(ko) {
		t.Errorf("module path %s is not absolute", ko)
	}
	if got := modinfo(t, ko, "vermagic"); !strings.HasPrefix(got, kver+" ") {
		t.Errorf("modinfo -F vermagic %s = %q, want it to start with %q", ko, got, kver+" ")
	}
	if got, want := modinfo(t, ko, "alias"), "pci:v00001234d000011E8sv*sd*bc*sc*i*"; got != want {
		t.Errorf("modinfo -F alias %s = %q, want %q", ko, got, want)
	}
	if got := modinfo(t, ko, "version"); got != version {
		t.Errorf("modinfo -F version %s = %q, want %q", ko, got, version)
	}
	if got := modinfo(t, ko, "license"); got != "GPL" {
		t.Errorf("modinfo -F license %s = %q, want GPL", ko, got)
	}

	// The compiler that built the module is the kernel's: gcc records its
	// version in .comment ("GCC: (Debian 12.2.0-14+deb12u1) 12.2.0"), which
	// must match CONFIG_CC_VERSION_TEXT without the command name.
	out, err := exec.Command("readelf", "-p", ".comment", ko).Output()
	if err != nil {
		t.Fatalf("readelf -p .comment %s: %v", ko, err)
	}
	_, kernelCC, _ := strings.Cut(res.KernelCompiler, " ")
	if kernelCC == "" || !strings.Contains(string(out), "GCC: "+kernelCC) {
		t.Errorf("%s .comment = %q, want it to contain %q (kernel compiler %q)", ko, out, "GCC: "+kernelCC, res.KernelCompiler)
	}
	if len(res.Warnings) != 0 {
		t.Errorf("BuildResult.Warnings = %q, want none", res.Warnings)
	}

	// The build is warning-free.
	log, err := os.ReadFile(res.LogPath)
	if err != nil {
		t.Fatalf("read make.log: %v", err)
	}
	if strings.Contains(string(log), "warning:") {
		t.Errorf("make.log %s has compiler warnings:\n%s", res.LogPath, log)
	}
	if !strings.Contains(string(log), "LD [M]") {
		t.Errorf("make.log %s does not show the module link:\n%s", res.LogPath, log)
	}

	// Copy out, as a caller does before removing WorkDir.
	dst := filepath.Join(t.TempDir(), "out")
	copied, err := CopyModules(res, dst)
	if err != nil {
		t.Fatalf("CopyModules: %v", err)
	}
	if len(copied) != 1 || modinfo(t, copied[0], "version") != version {
		t.Errorf("CopyModules = %v, want one module with version %s", copied, version)
	}
}

// TestBuildBrokenSource checks that a compile error comes back as a
// BuildError naming the file and the compiler's message.
func TestBuildBrokenSource(t *testing.T) {
	requireTools(t)
	for _, kver := range testKernels {
		t.Run(kver, func(t *testing.T) {
			src := filepath.Join(t.TempDir(), "src")
			copyTree(t, testDriverDir(t), src)
			editFile(t, filepath.Join(src, "kpreload_edu.c"),
				"edu->id = ioread32(edu->bar0 + EDU_REG_ID);",
				"edu->id = ioread32(edu->bar0 + EDU_REG_ID)")
			res, err := build(t, src, kver, nil)
			if err == nil {
				t.Fatalf("Build(broken source) = %v, want an error", res.Modules)
			}
			var be *BuildError
			if !errors.As(err, &be) {
				t.Fatalf("Build(broken source) error = %T %v, want *BuildError", err, err)
			}
			t.Logf("BuildError: %v", be)
			if !strings.Contains(be.FirstError, "error:") || !strings.Contains(be.FirstError, "kpreload_edu.c:") || !strings.Contains(be.FirstError, "expected ';'") {
				t.Errorf("BuildError.FirstError = %q, want a gcc error in kpreload_edu.c about the missing ';'", be.FirstError)
			}
			if filepath.Base(be.LogPath) != "make.log" {
				t.Errorf("BuildError.LogPath = %q, want the make.log", be.LogPath)
			}
			if data, err := os.ReadFile(be.LogPath); err != nil || !strings.Contains(string(data), be.FirstError) {
				t.Errorf("make.log %s (err %v) does not contain FirstError %q", be.LogPath, err, be.FirstError)
			}
			if be.ExitCode == 0 || be.Kernel != kver || be.Version != "1.0.0" {
				t.Errorf("BuildError = %+v, want a non-zero exit for kpreload-edu 1.0.0 on %s", be, kver)
			}
		})
	}
}

// TestBuildCancel checks that cancelling the context kills dkms and
// everything it started. The package's make sleeps and records its pid.
func TestBuildCancel(t *testing.T) {
	requireTools(t)
	kver := testKernels[0]
	src := t.TempDir()
	pidFile := filepath.Join(t.TempDir(), "sleep.pid")
	files := map[string]string{
		"dkms.conf": "PACKAGE_NAME=kpreload-sleepy\nPACKAGE_VERSION=0.1\nBUILT_MODULE_NAME[0]=sleepy\nDEST_MODULE_LOCATION[0]=/updates/dkms\nMAKE[0]=\"make sleep\"\nCLEAN=true\n",
		"Makefile":  "sleep:\n\tsh -c 'echo $$$$ > \"$(PIDFILE)\"; exec sleep 300'\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(src, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		res *BuildResult
		err error
	}
	done := make(chan result, 1)
	req := BuildRequest{
		SourceDir: src, Kernel: kver, KernelSourceDir: headersDir(t, kver),
		WorkDir: filepath.Join(t.TempDir(), "work"), Jobs: 1,
		Env: []string{"PIDFILE=" + pidFile},
	}
	go func() {
		res, err := New().Build(ctx, req)
		done <- result{res, err}
	}()

	var pid int
	deadline := time.Now().Add(60 * time.Second)
	for pid == 0 {
		if data, err := os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(data), "\n") {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		}
		select {
		case r := <-done:
			t.Fatalf("Build returned before make started: %v, %v", r.res, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("make never started (no pid file after 60s)")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !alive(pid) {
		t.Fatalf("sleep (pid %d) is not running before cancel", pid)
	}
	start := time.Now()
	cancel()
	select {
	case r := <-done:
		if !errors.Is(r.err, context.Canceled) {
			t.Errorf("Build after cancel = %v, %v; want context.Canceled", r.res, r.err)
		}
		t.Logf("Build returned %v after %v", r.err, time.Since(start).Round(time.Millisecond))
	case <-time.After(15 * time.Second):
		t.Fatal("Build did not return within 15s of cancel")
	}
	for i := 0; alive(pid); i++ {
		if i > 100 {
			t.Fatalf("sleep (pid %d), started by dkms's make, still runs after cancel", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// alive reports whether pid runs (a zombie waiting to be reaped is dead).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// Field 3, after "pid (comm)", is the state.
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// TestBuildRequestChecks covers requests Build refuses before running dkms.
func TestBuildRequestChecks(t *testing.T) {
	requireTools(t)
	h61, h612 := headersDir(t, testKernels[0]), headersDir(t, testKernels[1])
	nonEmpty := t.TempDir()
	if err := os.WriteFile(filepath.Join(nonEmpty, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	base := BuildRequest{SourceDir: testDriverDir(t), Kernel: testKernels[0], KernelSourceDir: h61}
	tests := []struct {
		name   string
		mutate func(*BuildRequest)
		want   string
	}{
		{"headers of another kernel", func(r *BuildRequest) { r.KernelSourceDir = h612 }, "are for kernel " + testKernels[1]},
		{"missing compiler", func(r *BuildRequest) { r.CC = "gcc-99-kpreload-test" }, "install Debian package gcc-99-kpreload-test"},
		{"non-empty WorkDir", func(r *BuildRequest) { r.WorkDir = nonEmpty }, "is not empty"},
		{"relative WorkDir", func(r *BuildRequest) { r.WorkDir = "work" }, "not absolute"},
		{"no dkms.conf", func(r *BuildRequest) { r.SourceDir = t.TempDir() }, "dkms.conf"},
		{"not headers", func(r *BuildRequest) { r.KernelSourceDir = t.TempDir() }, "not a prepared kernel headers tree"},
		{"missing kernel", func(r *BuildRequest) { r.Kernel = "" }, "BuildRequest.Kernel is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := base
			req.WorkDir = filepath.Join(t.TempDir(), "work")
			tt.mutate(&req)
			res, err := New().Build(context.Background(), req)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Build(%s) = %v, %v; want an error containing %q", tt.name, res, err, tt.want)
			}
		})
	}
}

// TestBuildExclusive checks that a package whose BUILD_EXCLUSIVE_KERNEL
// refuses the kernel gives ErrBuildExclusive rather than a build failure.
func TestBuildExclusive(t *testing.T) {
	requireTools(t)
	src := filepath.Join(t.TempDir(), "src")
	copyTree(t, testDriverDir(t), src)
	editFile(t, filepath.Join(src, "dkms.conf"), `AUTOINSTALL="yes"`, `AUTOINSTALL="yes"`+"\n"+`BUILD_EXCLUSIVE_KERNEL="^5\."`)
	_, err := build(t, src, testKernels[0], nil)
	var be *BuildError
	if !errors.As(err, &be) || !errors.Is(err, ErrBuildExclusive) || be.ExitCode != 77 {
		t.Errorf("Build(BUILD_EXCLUSIVE_KERNEL=^5\\.) error = %v, want a BuildError with exit 77 wrapping ErrBuildExclusive", err)
	}
}

// ccKernel is the kernel of TestBuildUsesCC's build.
var ccKernel = testKernels[len(testKernels)-1]

// TestBuildUsesCC checks that the compiler Build chooses reaches every
// compile: a wrapper given as CC records its calls and runs the real gcc.
// The build is the test driver as v2.0.0, TestBuildTestDriver's case for
// ccKernel, and gets all of that test's checks too.
func TestBuildUsesCC(t *testing.T) {
	requireTools(t)
	kver := ccKernel
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	wrapper := filepath.Join(dir, "kpreload-test-cc")
	script := "#!/bin/sh\necho \"$@\" >> " + calls + "\nexec x86_64-linux-gnu-gcc-12 \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	res, err := build(t, testDriverVersion(t, "2.0.0"), kver, func(r *BuildRequest) { r.CC = wrapper })
	if err != nil {
		t.Fatalf("Build(CC=%s): %v", wrapper, err)
	}
	checkTestDriver(t, res, kver, "2.0.0")
	if res.CC != wrapper || len(res.Warnings) != 0 {
		t.Errorf("BuildResult CC=%q Warnings=%q, want %q and no warnings", res.CC, res.Warnings, wrapper)
	}
	data, err := os.ReadFile(calls)
	if err != nil {
		t.Fatalf("the CC wrapper was never called: %v", err)
	}
	for _, want := range []string{"kpreload_edu.c", "kpreload_edu.mod.c"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("CC wrapper calls do not include a compile of %s:\n%s", want, data)
		}
	}
}
