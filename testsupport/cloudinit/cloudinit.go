// Package cloudinit gives tests the cloud-init a Debian suite ships, to ask
// for its own verdict on user-data (cloud-init schema): a root made once
// with mmdebstrap (minbase plus cloud-init) through kpreload's private apt
// configuration of the suite (builder/archive, the same sources and keyring
// as every other download), kept under the machine's download cache by
// content: the suite, its sources and the cloud-init version it resolves. A
// new cloud-init in the archive makes a new root; a warm run reuses it.
package cloudinit

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/archive"
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

// Get returns suite's cloud-init root, making it when the machine's cache
// lacks it (mmdebstrap, a few minutes, once per cloud-init version); the test
// fails when that fails. It skips under -short.
func Get(t testing.TB, suite string) Root {
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
	h := sha256.New()
	fmt.Fprintf(h, "suite %s\nsources %s\ninclude cloud-init=%s\nvariant minbase\n", suite, a.SourcesList(), v)
	base := filepath.Join(cache, "cloud-init-root")
	r := Root{Suite: suite, Version: v, Dir: filepath.Join(base, suite+"-"+hex.EncodeToString(h.Sum(nil))[:16])}
	if _, err := os.Stat(filepath.Join(r.Dir, ".complete")); err == nil {
		return r
	}
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		t.Fatalf("cloud-init root for %s: mmdebstrap is not installed (run scripts/deps.sh): %v", suite, err)
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(base, ".tmp-"+suite+"-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	t.Logf("making a %s root with cloud-init %s (mmdebstrap, once)", suite, v)
	dir := filepath.Join(tmp, "root")
	args := []string{"--variant=minbase", "--mode=root", "--quiet", "--include=cloud-init=" + v,
		"--customize-hook=rm -rf \"$1\"/var/lib/apt/lists/* \"$1\"/var/cache/apt/archives/*.deb", suite, dir}
	for _, l := range strings.Split(strings.TrimSpace(a.SourcesList()), "\n") {
		args = append(args, l)
	}
	if out, err := exec.CommandContext(ctx, "mmdebstrap", args...).CombinedOutput(); err != nil {
		t.Fatalf("mmdebstrap of a %s root with cloud-init %s: %v\n%s", suite, v, err, lastLines(out, 30))
	}
	if err := os.WriteFile(filepath.Join(dir, ".complete"), []byte(v+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir, r.Dir); err != nil {
		if _, serr := os.Stat(filepath.Join(r.Dir, ".complete")); serr != nil {
			t.Fatal(err)
		} // else another test made it meanwhile
	}
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

// lastLines is the end of out, for messages.
func lastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
