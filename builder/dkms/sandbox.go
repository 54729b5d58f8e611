package dkms

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kpreload/kpreload/builder/internal/runner"
)

// The sandbox: every dkms run happens in a private mount namespace
// (util-linux's unshare, so nothing is mounted on the host) whose view of the
// system is kpreload's alone, at the same fixed paths on every build host:
//
//	/var/lib/dkms          WorkDir/dkms: dkms's tree (--dkmstree), build directories included
//	/usr/src               WorkDir/src: the package source (--sourcetree) and the kernel build directory
//	/usr/src/kpreload-kernel  the unpacked kernel (headers, -common, kbuild), read-only
//	/etc/dkms              WorkDir/etc: kpreload's framework.conf, and nothing else (where the host has /etc/dkms)
//	/lib/modules           WorkDir/modules: empty and read-only, so no modules.dep (where the host has /lib/modules)
//	TMPDIR                 /var/lib/dkms/.tmp (in a build root, its /tmp is a fresh tmpfs too)
//
// So nothing the host has installed or configured reaches a build (its own
// /etc/dkms overrides and framework.conf, a kernel installed under
// /lib/modules, other packages under /usr/src or /var/lib/dkms), and the
// paths the compiler records (debug information, hence the build id) are
// the same whichever directory the build runs in: two builds of one cache
// key give the same bytes. In a build root the same mounts are made inside
// it, and dkms runs chrooted there.
const (
	// SandboxDKMSTree is dkms's tree inside the sandbox.
	SandboxDKMSTree = "/var/lib/dkms"
	// SandboxSourceTree is dkms's source tree inside the sandbox.
	SandboxSourceTree = "/usr/src"
	// SandboxKernel is where the unpacked kernel is mounted inside the sandbox.
	SandboxKernel = "/usr/src/kpreload-kernel"
)

// frameworkConf is the only dkms configuration a build sees: every framework
// variable dkms 3 reads, set. Signing is kpreload's (after the build, with
// the recipe's key), never dkms's: sign_file names a file that does not
// exist, and the MOK paths stay inside the dkms tree, so dkms never makes a
// key. Compression is kpreload's too: dkms compresses only when
// /lib/modules/<kver>/modules.dep names compressed modules, and the
// sandbox's /lib/modules is empty, so cells hold plain .ko files.
const frameworkConf = `# Written by kpreload: the only dkms configuration a cell's build sees.
source_tree="/usr/src"
dkms_tree="/var/lib/dkms"
install_tree="/lib/modules"
tmp_location="/var/lib/dkms/.tmp"
verbose=""
symlink_modules=""
autoinstall_all_kernels=""
modprobe_on_install=""
sign_file="/var/lib/dkms/.signing-disabled/sign-file"
mok_signing_key="/var/lib/dkms/.signing-disabled/mok.key"
mok_certificate="/var/lib/dkms/.signing-disabled/mok.pub"
`

// sandboxScript runs as "sh -c sandboxScript kpreload-dkms ROOT [KIND SRC
// DST]... -- CMD...", inside "unshare --mount --propagation private": it
// makes each mount in order (KIND bind, ro (a read-only bind), tmpfs or
// proc), then runs CMD in /var/lib/dkms, chrooted when ROOT is not "/".
// Which mounts, and where, is sandboxMounts' decision.
const sandboxScript = `set -e
root=$1; shift
while [ "$1" != -- ]; do
  case $1 in
    bind) mount --rbind "$2" "$3" ;;
    ro) mount --rbind "$2" "$3"; mount -o remount,bind,ro "$3" ;;
    tmpfs) mount -t tmpfs tmpfs "$3" ;;
    proc) mount -t proc proc "$3" ;;
    *) echo "kpreload-dkms: unknown mount kind $1" >&2; exit 2 ;;
  esac
  shift 3
done
shift
if [ "$root" != / ]; then
  exec chroot "$root" /bin/sh -c 'cd /var/lib/dkms && exec "$@"' kpreload-dkms "$@"
fi
cd /var/lib/dkms
exec "$@"`

// mount is one mount of the sandbox.
type mount struct{ kind, src, dst string }

// sandboxMounts returns the sandbox's mounts for a build in work with the
// unpacked kernel at kernel, on the host (root "/") or in a build root. The
// kernel is mounted inside work/src before work/src is mounted over
// /usr/src, so it may live anywhere, even under the host's /usr/src.
// /etc/dkms and /lib/modules are covered where they exist (a host without
// them has nothing there to hide); /usr/src and /var/lib/dkms must exist,
// since the fixed paths live there. The host's /tmp stays as it is (a
// compiler wrapper may live there); a build root's gets a fresh tmpfs, so
// nothing is written into the build root.
func sandboxMounts(r runner.Runner, root, work, kernel string) ([]mount, error) {
	if _, err := r.LookPath("unshare"); err != nil {
		return nil, fmt.Errorf("unshare (util-linux) is not installed: %w", err)
	}
	at := func(p string) string { return filepath.Join(root, p) }
	isDir := func(p string) bool {
		info, err := os.Stat(p)
		return err == nil && info.IsDir()
	}
	for _, p := range []string{"/usr/src", "/var/lib/dkms"} {
		if !isDir(at(p)) {
			hint := "is dkms installed? run scripts/deps.sh"
			if root != "/" {
				hint = "the build root is incomplete"
			}
			return nil, fmt.Errorf("the dkms sandbox mounts over %s, which is not a directory in %s (%s)", p, root, hint)
		}
	}
	var ms []mount
	if root != "/" {
		ms = append(ms, mount{"proc", "proc", at("/proc")}, mount{"bind", "/dev", at("/dev")}, mount{"tmpfs", "tmpfs", at("/tmp")})
	}
	ms = append(ms,
		mount{"ro", kernel, filepath.Join(work, "src", "kpreload-kernel")},
		mount{"bind", filepath.Join(work, "src"), at(SandboxSourceTree)},
		mount{"bind", filepath.Join(work, "dkms"), at(SandboxDKMSTree)},
	)
	if isDir(at("/etc/dkms")) {
		ms = append(ms, mount{"bind", filepath.Join(work, "etc"), at("/etc/dkms")})
	}
	if isDir(at("/lib/modules")) {
		ms = append(ms, mount{"ro", filepath.Join(work, "modules"), at("/lib/modules")})
	}
	return ms, nil
}

// layoutSandbox makes WorkDir's directories for the sandbox: the dkms tree,
// the source tree with the kernel's mount point, the configuration and the
// empty module tree.
func layoutSandbox(work string) error {
	for _, dir := range []string{"dkms", "dkms/.tmp", "src", "src/kpreload-kernel", "etc", "modules"} {
		if err := os.Mkdir(filepath.Join(work, dir), 0o755); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(work, "etc", "framework.conf"), []byte(frameworkConf), 0o644)
}

// sandboxCmd returns the command that runs name with args in a sandbox
// with mounts ms, chrooted in root unless it is "/".
func sandboxCmd(root string, ms []mount, name string, args ...string) runner.Cmd {
	a := []string{"--mount", "--propagation", "private", "--", "/bin/sh", "-c", sandboxScript, "kpreload-dkms", root}
	for _, m := range ms {
		a = append(a, m.kind, m.src, m.dst)
	}
	a = append(a, "--", name)
	return runner.Cmd{Name: "unshare", Args: append(a, args...)}
}

// sandboxEnv is the whole environment of a build: nothing of the caller's
// (a KCFLAGS, CROSS_COMPILE or MAKEFLAGS there would change what is built)
// beyond what is listed here, then extra (the request's, which wins).
func sandboxEnv(cc string, extra []string) []string {
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + SandboxDKMSTree,
		"LC_ALL=C", // English compiler messages, so FirstError finds "error:"
		"TMPDIR=" + SandboxDKMSTree + "/.tmp",
		"TERM=dumb",
		// Kbuild's own switch for reproducible builds: with it set, pahole
		// does not encode a module's BTF in parallel threads (before pahole
		// 1.27 that made the .BTF section differ from build to build).
		"KBUILD_BUILD_TIMESTAMP=1970-01-01",
		"SOURCE_DATE_EPOCH=0",
		// framework.conf says so too; these cover a host without /etc/dkms,
		// where dkms takes them from the environment.
		"sign_file=/var/lib/dkms/.signing-disabled/sign-file",
		"mok_signing_key=/var/lib/dkms/.signing-disabled/mok.key",
		"mok_certificate=/var/lib/dkms/.signing-disabled/mok.pub",
	}
	if cc != "" {
		env = append(env, "MAKEFLAGS=CC="+cc)
	}
	return append(env, extra...)
}

// inKernel returns the sandbox path of host path p inside the unpacked
// kernel mounted from kroot. Both are made absolute first, so a kernel
// unpacked under a relative $KPRELOAD_CACHE compares as one under an
// absolute one (the headers' directory is absolute, the source tree found
// beside it is not).
func inKernel(kroot, p string) (string, error) {
	ar, err1 := filepath.Abs(kroot)
	ap, err2 := filepath.Abs(p)
	if err := errors.Join(err1, err2); err != nil {
		return "", fmt.Errorf("%s inside the unpacked kernel %s: %w", p, kroot, err)
	}
	rel, err := filepath.Rel(ar, ap)
	if err != nil || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("%s is not inside the unpacked kernel %s", p, kroot)
	}
	return filepath.Join(SandboxKernel, rel), nil
}
