package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/builder/image/rootfs"
	"github.com/kpreload/kpreload/internal/layout"
	"github.com/kpreload/kpreload/internal/version"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// rootPackages are what the test roots hold beyond mmdebstrap's minbase:
// man-db for man, and the shells whose completion the package ships, with
// bash-completion (which loads bash's, and whose functions cobra's use).
var rootPackages = []string{"bash-completion", "fish", "man-db", "zsh"}

// codeBlock returns the command lines (comments and the blanks before them
// cut) of the first ```sh block after heading in the Markdown file.
func codeBlock(t *testing.T, file, heading string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut("\n"+string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no %q", file, heading)
	}
	_, rest, ok = strings.Cut(rest, "```sh\n")
	if !ok {
		t.Fatalf("%s: no ```sh block after %q", file, heading)
	}
	block, _, _ := strings.Cut(rest, "```")
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(block), "\n") {
		if i := strings.Index(l, " #"); i >= 0 {
			l = l[:i]
		}
		lines = append(lines, strings.TrimSpace(l))
	}
	return lines
}

// chroot runs script with sh in root, in mount and PID namespaces of its
// own with /proc mounted (as on an installed system: kpreload finds its
// programs through /proc/self/exe), with a clean environment, and returns
// its standard output and error together.
func chroot(ctx context.Context, root, dir, script string) (string, error) {
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--pid", "--fork", "--mount-proc", "--root="+root, "/bin/sh", "-c", "cd "+dir+" && "+script)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8", "DEBIAN_FRONTEND=noninteractive", "TERM=dumb"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestInstallPackage: the README's two commands, exactly as written: make
// deb here, then apt-get install of the package in fresh bookworm and trixie
// roots; there the documented checks, completion, the inert kernel hooks, the
// plugin and the packaged recipes. lintian reports no error.
func TestInstallPackage(t *testing.T) {
	testenv.SkipShort(t, "builds the package, runs mmdebstrap and lintian")
	for _, tool := range []string{"mmdebstrap", "lintian", "dpkg-deb", "unshare", "make", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing: run scripts/deps.sh (%v)", tool, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 15*time.Minute))
	defer cancel()
	repo := testenv.RepoRoot(t)
	readme := codeBlock(t, filepath.Join(repo, "README.md"), "## Install as a package")
	if len(readme) != 2 || readme[0] != "make deb" || !strings.HasPrefix(readme[1], "apt-get install ./out/") {
		t.Fatalf("README's package block is %q; this test runs make deb, then apt-get install ./out/…", readme)
	}
	if got := codeBlock(t, filepath.Join(repo, "docs/package.md"), "# The Debian package"); strings.Join(got, "\n") != strings.Join(readme, "\n") {
		t.Errorf("docs/package.md's commands %q differ from the README's %q", got, readme)
	}

	start := time.Now()
	cmd := exec.CommandContext(ctx, "sh", "-c", readme[0])
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", readme[0], err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(repo, "out", "kpreload_*.deb"))
	want := filepath.Join(repo, "out", fmt.Sprintf("kpreload_%s-1_amd64.deb", version.Release))
	if len(debs) != 1 || debs[0] != want {
		t.Fatalf("make deb left %q in out/, want %s alone", debs, want)
	}
	deb := debs[0]
	t.Logf("make deb: %s in %.0fs", filepath.Base(deb), time.Since(start).Seconds())

	t.Run("lintian", func(t *testing.T) {
		start := time.Now()
		out, err := exec.CommandContext(ctx, "lintian", "--fail-on", "error", deb).CombinedOutput()
		var errs, warns []string
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			switch l := sc.Text(); {
			case strings.HasPrefix(l, "E: "):
				errs = append(errs, l)
			case strings.HasPrefix(l, "W: "):
				warns = append(warns, l)
			}
		}
		if err != nil || len(errs) > 0 {
			t.Errorf("lintian: %v, %d errors:\n%s", err, len(errs), out)
		}
		t.Logf("lintian in %.0fs: %d errors, %d warnings:\n%s", time.Since(start).Seconds(), len(errs), len(warns), strings.Join(warns, "\n"))
	})

	checks := codeBlock(t, filepath.Join(repo, "docs/package.md"), "## Checking an installed package")
	for _, suite := range []string{"bookworm", "trixie"} {
		t.Run(suite, func(t *testing.T) { installIn(ctx, t, suite, deb, readme[1], checks) })
	}
}

// installIn makes a fresh root of suite (its tarball cached by content),
// installs the package with the README's command and tries it.
func installIn(ctx context.Context, t *testing.T, suite, deb, install string, checks []string) {
	start := time.Now()
	cache := testenv.CacheRoot()
	a, err := archive.New(suite, cache)
	if err != nil {
		t.Fatal(err)
	}
	dates, err := a.ReleaseDates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var sources []string
	for _, l := range strings.Split(strings.TrimSpace(a.SourcesList()), "\n") {
		sources = append(sources, l)
	}
	spec := rootfs.Spec{Suite: suite, Sources: sources, Packages: rootPackages, Date: dates, DistributionInitramfs: true}
	tarball, info, err := rootfs.Tarball(ctx, rootfs.HostTools(), spec, filepath.Join(cache, "rootfs"), t.TempDir(), func(s string) { t.Log(s) })
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "root")
	if err := rootfs.Unpack(ctx, rootfs.HostTools().Mmdebstrap, tarball, root); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s root (%s, cached %v) ready in %.0fs", suite, dates, info.Cached, time.Since(start).Seconds())

	// The README's command, as written, in a directory holding out/.
	if err := os.MkdirAll(filepath.Join(root, "tmp/pkg/out"), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(deb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "tmp/pkg/out", filepath.Base(deb)), b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := chroot(ctx, root, "/tmp/pkg", install+" </dev/null")
	if err != nil {
		t.Fatalf("%s in the %s root: %v\n%s", install, suite, err, out)
	}
	t.Logf("%s: installed in %.0fs since the root was asked for", install, time.Since(start).Seconds())

	run := func(what, script string, want ...string) string {
		t.Helper()
		out, err := chroot(ctx, root, "/", script)
		if err != nil {
			t.Errorf("%s (%s) in %s: %v\n%s", what, script, suite, err, out)
			return out
		}
		for _, w := range want {
			if !strings.Contains(strings.Join(strings.Fields(out), " "), w) {
				t.Errorf("%s (%s) in %s lacks %q:\n%s", what, script, suite, w, out)
			}
		}
		return out
	}
	// First, before any command writes /var/lib/kpreload:
	// The kernel hooks are there and do nothing: no output, nothing written.
	hooks := `/etc/kernel/postinst.d/zz-kpreload 6.1.0-99-cloud-amd64 /boot/vmlinuz-6.1.0-99-cloud-amd64 && /etc/kernel/postrm.d/zz-kpreload 6.1.0-99-cloud-amd64 && kpreload kernel-hook grub-entries && /usr/lib/kernel/install.d/95-kpreload.install add 6.1.0-99-cloud-amd64 /boot/efi/x /boot/vmlinuz-6.1.0-99-cloud-amd64`
	if out := run("the packaged kernel hooks", hooks); out != "" {
		t.Errorf("the kernel hooks printed, before kpreload install:\n%s", out)
	}
	for _, p := range []string{"boot/kpreload", "var/lib/kpreload"} {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			t.Errorf("the kernel hooks made /%s before kpreload install", p)
		}
	}
	// The documented checks, exactly as written.
	expect := map[string][]string{
		"kpreload --version":    {"kpreload " + version.Release + " (commit "},
		"kpreload build --help": {"(default: ./recipes when it is a directory, else " + layout.Recipes + ")"},
		"man kpreload":          {"kpreload - GPU drivers ready the moment the kernel is", "kpreload-build(1)"},
	}
	for _, c := range checks {
		w, ok := expect[c]
		if !ok {
			t.Errorf("docs/package.md shows %q, which this test does not know how to check", c)
			continue
		}
		run("documented check", c, w...)
	}
	run("man page of a subcommand", "man kpreload-image-build", "kpreload-image-build - Build a bootable")

	// Completion from the directories Debian's shells read.
	run("bash completion", `bash -c 'source /usr/share/bash-completion/bash_completion && source /usr/share/bash-completion/completions/kpreload && complete -p kpreload && COMP_WORDS=(kpreload bui) COMP_CWORD=1 COMP_LINE="kpreload bui" COMP_POINT=12 && __start_kpreload && printf "reply:%s\n" "${COMPREPLY[@]}"'`,
		"complete -o default -F __start_kpreload kpreload", "reply:build")
	run("zsh completion", `zsh -fc 'autoload -U compinit && compinit -u && print -r -- "found:${_comps[kpreload]}"'`, "found:_kpreload")
	run("fish completion", `fish -c 'complete -C"kpreload bui"'`, "build")

	// The packaged recipes are --recipes' default outside a checkout.
	if out, _ := chroot(ctx, root, "/", "kpreload build no-such-recipe"); !strings.Contains(out, "no recipe of that name in "+layout.Recipes+" (have: ") || !strings.Contains(out, "testdriver") {
		t.Errorf("kpreload build no-such-recipe in %s's /: %s; want it looked in %s and listed the recipes", suite, out, layout.Recipes)
	}
	// The /init program is found where the package put it: the command goes
	// past it, to the missing kernel modules.
	if out, _ := chroot(ctx, root, "/", "kpreload initramfs --kernel 6.1.0-99-cloud-amd64 -o /tmp/initrd"); strings.Contains(out, "/init binary") || out == "" {
		t.Errorf("kpreload initramfs in %s did not find %s/kpreload-init: %s", suite, layout.LibDir, out)
	}
	run("the Packer plugin", layout.LibDir+"/"+layout.Plugin+" describe", `"version":"`+version.Release+`"`)

	// Removed, not purged: the hooks (conffiles) stay and find no kpreload;
	// purged: they are gone.
	conffileHooks := `/etc/kernel/postinst.d/zz-kpreload 6.1.0-99-cloud-amd64 /boot/vmlinuz-6.1.0-99-cloud-amd64 && /etc/kernel/postrm.d/zz-kpreload 6.1.0-99-cloud-amd64 && /etc/grub.d/09_kpreload`
	if out := run("apt-get remove", "apt-get remove -y -q kpreload </dev/null && ! test -e /usr/bin/kpreload && "+conffileHooks); strings.Contains(out, "zz-kpreload") || strings.Contains(out, "kpreload:") {
		t.Errorf("the hooks after apt-get remove kpreload printed:\n%s", out)
	}
	run("dpkg --purge", "dpkg --purge kpreload && ! test -e /etc/kernel/postinst.d/zz-kpreload && ! test -e /etc/grub.d/09_kpreload")
	t.Logf("%s: done in %.0fs", suite, time.Since(start).Seconds())
}
