// The cloud-init a Debian suite ships, to ask for its own verdict on
// user-data (cloud-init schema): a root made once with mmdebstrap (minbase
// plus cloud-init) through kpreload's private apt configuration of the suite
// (builder/archive, the same sources and keyring as every other download),
// kept as a tarball in the project's one cache of mmdebstrap roots
// (builder/image/rootfs) by content: the suite, its sources, the cloud-init
// version it resolves and the dates of the suite's Release files. A new
// upload makes a new root; a warm run reuses it.

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
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// Root is a suite's root with its cloud-init.
type Root struct {
	// Suite is the Debian suite, such as "trixie".
	Suite string
	// Version is its cloud-init's package version.
	Version string
	// Dir is the root directory.
	Dir string
}

// candidate returns the version apt would install of name from a.
func candidate(ctx context.Context, a *archive.Archive, name string) (string, error) {
	opts, err := a.AptOptions(ctx)
	if err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, "apt-cache", append(opts, "policy", name)...).Output()
	if err != nil {
		return "", fmt.Errorf("apt-cache policy %s (%s): %w", name, a.Suite, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "Candidate: "); ok && v != "(none)" {
			return v, nil
		}
	}
	return "", fmt.Errorf("%s carries no %s", a.Suite, name)
}

// cloudInitRoot returns suite's cloud-init root, unpacked into a directory of the
// test's own from the project's one cache of mmdebstrap roots
// (builder/image/rootfs.Tarball under the machine's download cache, keyed by
// the suite, its sources, cloud-init's version and the dates of the suite's
// Release files): mmdebstrap runs when that cache lacks it (minutes, once per
// archive state); the test fails when that fails. It skips under -short.
func cloudInitRoot(t testing.TB, suite string) Root {
	t.Helper()
	testenv.SkipShort(t, "mmdebstrap of a root with "+suite+"'s cloud-init (minutes, once per version)")
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 20*time.Minute))
	defer cancel()
	cache := testenv.CacheRoot()
	a, err := archive.New(suite, cache)
	if err != nil {
		t.Fatal(err)
	}
	v, err := candidate(ctx, a, "cloud-init")
	if err != nil {
		t.Fatalf("cloud-init root for %s: %v", suite, err)
	}
	dates, err := a.ReleaseDates(ctx)
	if err != nil {
		t.Fatalf("cloud-init root for %s: %v", suite, err)
	}
	spec := rootfs.Spec{Suite: suite, Sources: strings.Split(strings.TrimSpace(a.SourcesList()), "\n"),
		Packages: []string{"cloud-init=" + v}, Date: dates, DistributionInitramfs: true}
	tools := rootfs.HostTools()
	tarball, info, err := rootfs.Tarball(ctx, tools, spec, filepath.Join(cache, "rootfs"), t.TempDir(), func(s string) { t.Log(s) })
	if err != nil {
		t.Fatalf("cloud-init root for %s (cloud-init %s): %v", suite, v, err)
	}
	r := Root{Suite: suite, Version: v, Dir: filepath.Join(t.TempDir(), "root")}
	if err := rootfs.Unpack(ctx, tools.Mmdebstrap, tarball, r.Dir); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s root with cloud-init %s (cached %v)", suite, v, info.Cached)
	return r
}

// Schema runs `cloud-init schema -c FILE` in the root on userData and
// returns what it printed and whether it said the document is valid (exit
// status 0); err is for a run that could not happen at all.
func (r Root) Schema(ctx context.Context, userData []byte) (out string, valid bool, err error) {
	f, err := os.CreateTemp(filepath.Join(r.Dir, "tmp"), "user-data-")
	if err != nil {
		return "", false, err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(userData); err != nil {
		f.Close()
		return "", false, err
	}
	if err := f.Close(); err != nil {
		return "", false, err
	}
	cmd := exec.CommandContext(ctx, "chroot", r.Dir, "cloud-init", "schema", "-c", "/tmp/"+filepath.Base(f.Name()))
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}
	b, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 1 {
		return string(b), false, nil
	}
	if err != nil {
		return string(b), false, fmt.Errorf("cloud-init schema in the %s root: %w: %s", r.Suite, err, b)
	}
	return string(b), true, nil
}
