// Package dkms runs the real dkms program (dkms 3, a bash script) to build a
// DKMS package for one kernel, in a sandbox of its own per build.
//
// Isolation and reproducibility: dkms runs in a private mount namespace
// whose /var/lib/dkms, /usr/src, /etc/dkms, /lib/modules and /tmp are the
// build's own (see sandbox.go): the package source and the unpacked kernel
// appear at the same fixed paths on every host, dkms reads kpreload's
// framework.conf and no host override, and finds no modules.dep, so it
// neither signs nor compresses. It gets an explicit -k and --arch (so it
// never looks at rpm or the running kernel) and an environment of
// kpreload's making (PATH, LC_ALL, TMPDIR, the compiler), nothing of the
// caller's. The same source, headers, compiler and dkms therefore give the
// same module bytes in any work directory on any host; whatever still comes
// from outside (compiler, headers, kbuild, dkms version) is in the matrix's
// cache key. Nothing is mounted or written on the host outside WorkDir.
//
// Unpacked Debian headers: linux-headers-<kver>/Makefile is one line,
// "include /usr/src/linux-headers-<x>-common/Makefile", an absolute path
// that only exists inside the unpacked tree. Build then gives dkms a small
// kernel build directory, /usr/src/linux-headers-<kver> in the sandbox
// (WorkDir/src on the host), whose entries are symlinks into the unpacked
// kernel as mounted in the sandbox and whose Makefile includes the unpacked
// -common Makefile; the relative scripts/ and tools/ links into
// ../../lib/linux-kbuild-* keep resolving because the symlinks are absolute.
//
// Compiler: modules must be built with the compiler that built the kernel.
// Build takes it from CONFIG_CC_VERSION_TEXT (gcc-12 for Debian's 6.1
// kernels, x86_64-linux-gnu-gcc-12 for the 6.12 backports kernels; both are
// bookworm's gcc-12 package), checks it is installed and passes it to every
// make as CC= (through MAKEFLAGS, so recipes' own MAKE lines get it too).
//
// Lifecycle: the caller owns WorkDir. Build creates it (it must be absent or
// empty), leaves everything in it, the logs included, whether the build
// succeeds or fails, and never removes it. BuildResult.Modules point inside
// WorkDir: copy them out (CopyModules) before removing WorkDir.
package dkms

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/builder/buildroot"
	"github.com/kpreload/kpreload/builder/internal/runner"
	"github.com/kpreload/kpreload/internal/fileutil"
	"github.com/kpreload/kpreload/internal/inroot"
)

// DefaultPath is where Debian's dkms package installs the dkms program.
const DefaultPath = "/usr/sbin/dkms"

// Driver builds a DKMS package for one kernel. It is the seam between the
// build pipeline and the external dkms program, so the pipeline can be
// tested with a fake.
type Driver interface {
	// Build runs one dkms build; see BuildRequest for the inputs and
	// BuildResult for what comes back. A failed build returns a *BuildError.
	Build(ctx context.Context, req BuildRequest) (*BuildResult, error)
	// Version names the dkms that builds on the host (root nil) or in
	// root, for the cache key: "dkms-3.0.10", "trixie build root: dkms-3.0.10".
	Version(ctx context.Context, root *buildroot.Root) (string, error)
}

// BuildRequest is one dkms build: one package source, one kernel.
type BuildRequest struct {
	// SourceDir is the package source: a directory holding dkms.conf.
	SourceDir string
	// Kernel is the kernel release to build for (uname -r of the target).
	Kernel string
	// KernelSourceDir is the kernel headers tree, for example the unpacked
	// <root>/usr/src/linux-headers-<kver>.
	KernelSourceDir string
	// WorkDir is the root of this build's isolated dkms tree. Build creates
	// it; it must not exist or be empty. The caller removes it.
	WorkDir string
	// Arch is dkms's --arch; "" means the machine's (uname -m).
	Arch string
	// Jobs is the number of parallel make jobs; 0 means one per CPU.
	Jobs int
	// CC overrides the compiler; "" means the kernel's own (CONFIG_CC_VERSION_TEXT).
	CC string
	// Env holds extra environment variables (KEY=value) for dkms and make;
	// they win over the ones Build sets.
	Env []string
	// Output, if set, also receives dkms's own output while it runs (the
	// compiler's output goes to make.log).
	Output io.Writer
	// KernelTree is the kernel source tree the headers were made from
	// (Debian's linux-headers-<x>-common), inside the same unpacked kernel
	// as KernelSourceDir; "" means KernelSourceDir. make gets it as SYSSRC
	// and the kernel build directory as SYSOUT, where NVIDIA's Makefiles
	// look instead of /lib/modules/<kver>/source and build.
	KernelTree string
	// Root, if set, is a build root of the kernel's own Debian suite: dkms,
	// make and the compiler run there, chrooted inside the sandbox.
	Root *buildroot.Root
}

// BuildResult describes a successful build.
type BuildResult struct {
	// Name and Version are the dkms package's PACKAGE_NAME and PACKAGE_VERSION.
	Name, Version string
	// Kernel and Arch are what the modules were built for.
	Kernel, Arch string
	// Modules are the absolute paths of the built modules (.ko, or .ko.xz and
	// the like if dkms chose to compress), inside WorkDir, sorted.
	Modules []string
	// LogPath is the make.log of the build.
	LogPath string
	// DKMSLogPath is the captured output of dkms itself.
	DKMSLogPath string
	// Duration is how long dkms ran.
	Duration time.Duration
	// CC is the compiler passed to make ("" if left to the kernel's Makefile).
	CC string
	// CompilerVersion is the first line of "$CC --version".
	CompilerVersion string
	// KernelCompiler is the kernel's CONFIG_CC_VERSION_TEXT.
	KernelCompiler string
	// Warnings lists things that did not stop the build but deserve a look,
	// such as a compiler version that differs from the kernel's.
	Warnings []string
}

// DKMS is the real dkms driver.
type DKMS struct {
	// Path is the dkms program; "" means DefaultPath.
	Path string
	// Runner runs dkms in its sandbox and the tools Build checks first
	// (dkms --version, the compiler); nil means runner.Default.
	Runner runner.Runner
}

// New returns the real dkms driver, running DefaultPath.
func New() Driver { return &DKMS{Path: DefaultPath} }

// Build runs "dkms build" for req in an isolated tree under req.WorkDir.
func (d *DKMS) Build(ctx context.Context, req BuildRequest) (*BuildResult, error) {
	p, err := d.prepare(req)
	if err != nil {
		return nil, err
	}

	logFile, err := os.Create(p.dkmsLog)
	if err != nil {
		return nil, fmt.Errorf("dkms build: create log: %w", err)
	}
	defer logFile.Close()
	var out io.Writer = logFile
	if req.Output != nil {
		out = io.MultiWriter(logFile, req.Output)
	}

	root := "/"
	if req.Root != nil {
		root = req.Root.Dir
	}
	// dkms runs make in the background and make runs the compilers: the
	// runner puts them all in one process group, kills the group on
	// cancellation and leaves nothing of it behind once dkms ends.
	c := sandboxCmd(root, p.mounts, p.dkms, p.args...)
	c.Dir, c.Env, c.OnlyEnv = req.WorkDir, p.env, true
	c.Log, c.Combined = out, true

	start := time.Now()
	_, runErr := d.runner().Run(ctx, c)
	duration := time.Since(start)
	if ctxErr := ctx.Err(); ctxErr != nil {
		return nil, fmt.Errorf("dkms build of %s/%s for kernel %s: %w", p.name, p.version, req.Kernel, ctxErr)
	}
	if runErr != nil {
		var exitErr exitCoder
		if !errors.As(runErr, &exitErr) {
			return nil, fmt.Errorf("dkms build of %s/%s for kernel %s: %w", p.name, p.version, req.Kernel, runErr)
		}
		return nil, p.buildError(req.Kernel, exitErr)
	}

	base := filepath.Join(p.dkmsTree, p.name, p.version, req.Kernel, p.arch)
	modules, err := filepath.Glob(filepath.Join(base, "module", "*.ko*"))
	if err != nil || len(modules) == 0 {
		return nil, fmt.Errorf("dkms build of %s/%s for kernel %s: dkms succeeded but left no module in %s", p.name, p.version, req.Kernel, filepath.Join(base, "module"))
	}
	slices.Sort(modules)
	for _, m := range modules {
		if !strings.HasSuffix(m, ".ko") {
			// The sandbox has no modules.dep, so dkms must not have compressed.
			return nil, fmt.Errorf("dkms build of %s/%s for kernel %s: %s is compressed; kpreload's cells hold plain .ko files", p.name, p.version, req.Kernel, m)
		}
	}
	return &BuildResult{
		Name:            p.name,
		Version:         p.version,
		Kernel:          req.Kernel,
		Arch:            p.arch,
		Modules:         modules,
		LogPath:         filepath.Join(base, "log", "make.log"),
		DKMSLogPath:     p.dkmsLog,
		Duration:        duration,
		CC:              p.cc,
		CompilerVersion: p.ccVersion,
		KernelCompiler:  p.headers.CCVersionText,
		Warnings:        p.warnings,
	}, nil
}

// runner is d.Runner, or runner.Default.
func (d *DKMS) runner() runner.Runner { return runner.Or(d.Runner) }

// exitCoder is how a program that ran ended (an *exec.ExitError).
type exitCoder interface {
	error
	ExitCode() int
}

// Version returns "dkms --version" of the dkms Build runs on the host (root
// nil), or in root prefixed with its suite.
func (d *DKMS) Version(ctx context.Context, root *buildroot.Root) (string, error) {
	path := d.Path
	if path == "" {
		path = DefaultPath
	}
	var out []byte
	var err error
	if root != nil {
		out, err = root.Output(ctx, path, "--version")
	} else {
		out, err = d.runner().Run(ctx, runner.Cmd{Name: path, Args: []string{"--version"}})
	}
	if err != nil {
		return "", fmt.Errorf("%s --version (is dkms installed? run scripts/deps.sh): %w", path, err)
	}
	v := strings.TrimSpace(string(out))
	if root != nil {
		v = root.Suite + " build root: " + v
	}
	return v, nil
}

// plan is a checked, ready-to-run build.
type plan struct {
	dkms, name, version, arch string
	dkmsTree, dkmsLog         string
	kernelRoot                string
	mounts                    []mount
	cc, ccVersion             string
	headers                   *Headers
	args, env, warnings       []string
}

// prepare checks the request and the tools, and lays out WorkDir.
func (d *DKMS) prepare(req BuildRequest) (*plan, error) {
	p := &plan{dkms: d.Path}
	if p.dkms == "" {
		p.dkms = DefaultPath
	}
	for name, v := range map[string]string{"SourceDir": req.SourceDir, "Kernel": req.Kernel, "KernelSourceDir": req.KernelSourceDir, "WorkDir": req.WorkDir} {
		if v == "" {
			return nil, fmt.Errorf("dkms build: BuildRequest.%s is empty", name)
		}
	}
	if !filepath.IsAbs(req.WorkDir) {
		return nil, fmt.Errorf("dkms build: WorkDir %q is not absolute", req.WorkDir)
	}
	src, err := filepath.Abs(req.SourceDir)
	if err != nil {
		return nil, fmt.Errorf("dkms build: %w", err)
	}

	conf, err := ReadConf(filepath.Join(src, "dkms.conf"))
	if err != nil {
		return nil, fmt.Errorf("dkms build: %w", err)
	}
	p.name, p.version = conf.PackageName, conf.PackageVersion
	for field, v := range map[string]string{"PACKAGE_NAME": p.name, "PACKAGE_VERSION": p.version} {
		if v == "" || strings.ContainsAny(v, "$`/ \t\n'\"\\") {
			return nil, fmt.Errorf("dkms build: %s/dkms.conf: %s %q must be a plain non-empty word", src, field, v)
		}
	}

	p.headers, err = InspectHeaders(req.KernelSourceDir)
	if err != nil {
		return nil, fmt.Errorf("dkms build: %w", err)
	}
	if p.headers.Release != req.Kernel {
		return nil, fmt.Errorf("dkms build: headers %s are for kernel %s, not %s", p.headers.Dir, p.headers.Release, req.Kernel)
	}

	if req.Root != nil {
		for _, prog := range []string{p.dkms, "make"} {
			if !req.Root.Has(prog) {
				return nil, fmt.Errorf("dkms build: the %s build root %s lacks %s", req.Root.Suite, req.Root.Dir, prog)
			}
		}
		if p.headers.BTFModules && !req.Root.Has("pahole") {
			return nil, fmt.Errorf("dkms build: the %s build root %s lacks pahole, which kernel %s needs for BTF", req.Root.Suite, req.Root.Dir, req.Kernel)
		}
	} else {
		if err := checkDKMSVersion(d.runner(), p.dkms); err != nil {
			return nil, err
		}
		if _, err := d.runner().LookPath("make"); err != nil {
			return nil, fmt.Errorf("dkms build: make is not installed (run scripts/deps.sh): %w", err)
		}
		if p.headers.BTFModules {
			if _, err := d.runner().LookPath("pahole"); err != nil {
				return nil, fmt.Errorf("dkms build: kernel %s generates BTF for modules, which needs pahole (Debian package dwarves; run scripts/deps.sh): %w", req.Kernel, err)
			}
		}
	}
	p.cc = req.CC
	if p.cc == "" {
		p.cc = p.headers.CC
	}
	if p.cc != "" {
		if req.Root != nil {
			out, err := req.Root.Output(context.Background(), p.cc, "--version")
			if err != nil {
				return nil, fmt.Errorf("dkms build: compiler %s (kernel built with %q): %w", p.cc, p.headers.CCVersionText, err)
			}
			first, _, _ := bytes.Cut(out, []byte("\n"))
			p.ccVersion = strings.TrimSpace(string(first))
		} else if p.ccVersion, err = compilerVersion(d.runner(), p.cc, p.headers.CCVersionText); err != nil {
			return nil, fmt.Errorf("dkms build: %w", err)
		}
		if !sameCompiler(p.ccVersion, p.headers.CCVersionText) {
			p.warnings = append(p.warnings, fmt.Sprintf("compiler %q is %q but kernel %s was built with %q", p.cc, p.ccVersion, req.Kernel, p.headers.CCVersionText))
		}
	}

	p.arch = req.Arch
	if p.arch == "" {
		var u unix.Utsname
		if err := unix.Uname(&u); err != nil {
			return nil, fmt.Errorf("dkms build: uname: %w", err)
		}
		p.arch = unix.ByteSliceToString(u.Machine[:])
	}
	jobs := req.Jobs
	if jobs <= 0 {
		jobs = runtime.NumCPU()
	}

	// Lay out WorkDir.
	if err := os.MkdirAll(req.WorkDir, 0o755); err != nil {
		return nil, fmt.Errorf("dkms build: %w", err)
	}
	if entries, err := os.ReadDir(req.WorkDir); err != nil {
		return nil, fmt.Errorf("dkms build: %w", err)
	} else if len(entries) > 0 {
		return nil, fmt.Errorf("dkms build: WorkDir %s is not empty", req.WorkDir)
	}
	root := "/"
	if req.Root != nil {
		root = req.Root.Dir
	}
	if err := layoutSandbox(req.WorkDir); err != nil {
		return nil, fmt.Errorf("dkms build: %w", err)
	}
	p.dkmsTree = filepath.Join(req.WorkDir, "dkms")
	// dkms finds the source as <sourcetree>/<name>-<version> and copies it
	// into its build directory as it is (cp -a): the copy made here follows
	// symbolic links, so a source may share files with another through links
	// (recipes/testdriver-2), and the source itself is never written.
	if err := copySource(src, filepath.Join(req.WorkDir, "src", p.name+"-"+p.version)); err != nil {
		return nil, fmt.Errorf("dkms build: %w", err)
	}
	// The unpacked kernel is mounted at SandboxKernel: the whole root the
	// headers were unpacked in, or the headers directory alone.
	p.kernelRoot = p.headers.Root
	if p.kernelRoot == "" {
		p.kernelRoot = p.headers.Dir
	}
	kernelDir, err := inKernel(p.kernelRoot, p.headers.Dir)
	if err != nil {
		return nil, fmt.Errorf("dkms build: %w", err)
	}
	if p.headers.needsShadow() {
		if err := p.headers.shadow(filepath.Join(req.WorkDir, "src", "linux-headers-"+req.Kernel), p.kernelRoot); err != nil {
			return nil, fmt.Errorf("dkms build: %w", err)
		}
		kernelDir = filepath.Join(SandboxSourceTree, "linux-headers-"+req.Kernel)
	}
	kernelTree := kernelDir
	if req.KernelTree != "" {
		if kernelTree, err = inKernel(p.kernelRoot, req.KernelTree); err != nil {
			return nil, fmt.Errorf("dkms build: KernelTree: %w", err)
		}
	}
	p.dkmsLog = filepath.Join(req.WorkDir, "dkms.log")
	if p.mounts, err = sandboxMounts(d.runner(), root, req.WorkDir, p.kernelRoot); err != nil {
		return nil, fmt.Errorf("dkms build: %w", err)
	}

	p.args = []string{
		"build",
		"-m", p.name, "-v", p.version,
		"-k", req.Kernel, "--arch", p.arch,
		"--dkmstree", SandboxDKMSTree,
		"--sourcetree", SandboxSourceTree,
		"--installtree", "/lib/modules",
		"--kernelsourcedir", kernelDir,
		"-j", fmt.Sprint(jobs),
	}
	p.env = sandboxEnv(p.cc, append([]string{"SYSSRC=" + kernelTree, "SYSOUT=" + kernelDir}, req.Env...))
	return p, nil
}

// buildError describes a failed dkms run from its logs.
func (p *plan) buildError(kernel string, exitErr exitCoder) *BuildError {
	e := &BuildError{
		Name:        p.name,
		Version:     p.version,
		Kernel:      kernel,
		ExitCode:    exitErr.ExitCode(),
		LogPath:     p.dkmsLog,
		DKMSLogPath: p.dkmsLog,
		Err:         exitErr,
	}
	if e.ExitCode == 77 {
		e.Err = ErrBuildExclusive
	}
	// A failed build leaves make.log in the build directory.
	makeLog := filepath.Join(p.dkmsTree, p.name, p.version, "build", "make.log")
	if data, err := os.ReadFile(makeLog); err == nil {
		e.LogPath = makeLog
		e.FirstError = FirstError(string(data))
	}
	if e.FirstError == "" {
		if data, err := os.ReadFile(p.dkmsLog); err == nil {
			e.FirstError = FirstError(string(data))
		}
	}
	return e
}

// checkDKMSVersion makes sure path is dkms 3, whose options Build relies on.
func checkDKMSVersion(r runner.Runner, path string) error {
	out, err := r.Run(context.Background(), runner.Cmd{Name: path, Args: []string{"--version"}})
	if err != nil {
		return fmt.Errorf("dkms build: %s --version (is dkms installed? run scripts/deps.sh): %w", path, err)
	}
	v := strings.TrimSpace(string(out))
	if !strings.HasPrefix(v, "dkms-3.") {
		return fmt.Errorf("dkms build: %s is %q, want dkms 3.x", path, v)
	}
	return nil
}

// compilerVersion returns the first line of "cc --version".
func compilerVersion(r runner.Runner, cc, kernelText string) (string, error) {
	if _, err := r.LookPath(cc); err != nil {
		return "", fmt.Errorf("compiler %s not found (kernel built with %q; install Debian package %s, see scripts/deps.sh): %w", cc, kernelText, compilerPackage(cc), err)
	}
	out, err := r.Run(context.Background(), runner.Cmd{Name: cc, Args: []string{"--version"}})
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", cc, err)
	}
	first, _, _ := bytes.Cut(out, []byte("\n"))
	return strings.TrimSpace(string(first)), nil
}

// compilerPackage guesses the Debian package providing a gcc command:
// "gcc-12" and "x86_64-linux-gnu-gcc-12" are both in gcc-12.
func compilerPackage(cc string) string {
	base := filepath.Base(cc)
	if i := strings.LastIndex(base, "gcc-"); i >= 0 {
		return base[i:]
	}
	return base
}

// sameCompiler compares "cc --version" with CONFIG_CC_VERSION_TEXT, ignoring
// the command name (gcc-12 and x86_64-linux-gnu-gcc-12 are the same compiler).
func sameCompiler(version, kernelText string) bool {
	_, a, _ := strings.Cut(version, " ")
	_, b, _ := strings.Cut(kernelText, " ")
	return a == b
}

// CopyModules copies the built modules of res into dir (created if needed),
// keeping their file names, and returns the new paths. Use it before
// removing the build's WorkDir.
func CopyModules(res *BuildResult, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("copy modules: %w", err)
	}
	var out []string
	for _, m := range res.Modules {
		dst := filepath.Join(dir, filepath.Base(m))
		if err := fileutil.CopyAtomic(m, dst, 0o644, false); err != nil {
			return nil, fmt.Errorf("copy modules: %w", err)
		}
		out = append(out, dst)
	}
	return out, nil
}

// copySource copies the tree src to dst, following symbolic links (a link
// becomes a copy of what it points to) and keeping file modes.
func copySource(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := os.Stat(path) // follows links
		if err != nil {
			return fmt.Errorf("source: %w", err)
		}
		if info.IsDir() {
			if d.Type()&fs.ModeSymlink != 0 {
				return fmt.Errorf("source %s: links to directories are not supported", path)
			}
			return os.MkdirAll(target, 0o755)
		}
		if !info.Mode().IsRegular() {
			return fmt.Errorf("source %s: not a regular file", path)
		}
		in, err := inroot.OpenPath(path) // still a regular file: never waited on
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, info.Mode().Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return fmt.Errorf("copy %s: %w", path, err)
		}
		return out.Close()
	})
}
