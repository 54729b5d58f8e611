package testenv

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// AptArchive is a real apt archive a test publishes into with reprepro,
// its Release files signed by a fresh OpenPGP key (gpg), served over HTTP
// on loopback until the test ends.
type AptArchive struct {
	// URL is the archive's root, http://127.0.0.1:PORT.
	URL string
	// Dir is reprepro's base directory (conf/, dists/, pool/).
	Dir string
	// Suites are the archive's suites (codenames), each with component main.
	Suites []string
	// Key is the armored public key file that signs the Release files.
	Key string

	t     testing.TB
	gnupg string
}

// StartAptArchive makes an empty archive of suites (component main, amd64),
// signed by a new key, and serves it on a free loopback port. The test fails
// (it does not skip) when reprepro or gpg is missing: scripts/deps.sh installs them.
func StartAptArchive(t testing.TB, suites ...string) *AptArchive {
	t.Helper()
	for _, bin := range []string{"reprepro", "gpg", "dpkg-deb"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is missing (%v): scripts/deps.sh installs it (make test runs it)", bin, err)
		}
	}
	dir := t.TempDir()
	a := &AptArchive{Dir: filepath.Join(dir, "repo"), Suites: suites, t: t, gnupg: filepath.Join(dir, "gnupg")}
	if err := os.MkdirAll(filepath.Join(a.Dir, "conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	a.Key = a.NewKey(filepath.Join(dir, "archive-key.asc"))
	fpr := strings.TrimSpace(a.gpg("--list-keys", "--with-colons"))
	keyID := ""
	for _, l := range strings.Split(fpr, "\n") {
		if f := strings.Split(l, ":"); f[0] == "fpr" && len(f) > 9 {
			keyID = f[9]
			break
		}
	}
	if keyID == "" {
		t.Fatalf("gpg made no key: %s", fpr)
	}
	var conf strings.Builder
	for _, suite := range suites {
		fmt.Fprintf(&conf, "Codename: %s\nSuite: %s\nArchitectures: amd64\nComponents: main\nSignWith: %s\n\n", suite, suite, keyID)
	}
	if err := os.WriteFile(filepath.Join(a.Dir, "conf", "distributions"), []byte(conf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	a.reprepro("export")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.FileServer(http.Dir(a.Dir))}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	a.URL = "http://" + ln.Addr().String()
	return a
}

// NewKey makes another signing key in the archive's keyring (the first one
// made signs the Release files) and writes its armored public key to file.
func (a *AptArchive) NewKey(file string) string {
	a.t.Helper()
	if _, err := os.Stat(a.gnupg); err != nil {
		if err := os.MkdirAll(a.gnupg, 0o700); err != nil {
			a.t.Fatal(err)
		}
		home := a.gnupg
		a.t.Cleanup(func() {
			cmd := exec.Command("gpgconf", "--kill", "gpg-agent")
			cmd.Env = append(os.Environ(), "GNUPGHOME="+home)
			cmd.Run()
		})
	}
	uid := fmt.Sprintf("kpreload test archive %s <archive@kpreload.invalid>", filepath.Base(file))
	a.gpg("--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "never")
	pub := a.gpg("--armor", "--export", uid)
	if err := os.WriteFile(file, []byte(pub), 0o644); err != nil {
		a.t.Fatal(err)
	}
	return file
}

// Publish builds an empty package name=version (amd64) and adds it to
// suite (replacing the version it had: reprepro keeps one per suite),
// re-signing the suite's Release files.
func (a *AptArchive) Publish(suite, name, version string) {
	a.t.Helper()
	a.PublishFiles(suite, name, version, nil)
}

// PublishFiles is Publish of a package holding files (path in the package:
// content).
func (a *AptArchive) PublishFiles(suite, name, version string, files map[string]string) {
	a.t.Helper()
	root := filepath.Join(a.t.TempDir(), "pkg")
	for path, content := range files {
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			a.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			a.t.Fatal(err)
		}
	}
	control := fmt.Sprintf("Package: %s\nVersion: %s\nArchitecture: amd64\nSection: misc\nPriority: optional\nMaintainer: kpreload tests <tests@kpreload.invalid>\nDescription: test package\n", name, version)
	if err := os.MkdirAll(filepath.Join(root, "DEBIAN"), 0o755); err != nil {
		a.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "DEBIAN", "control"), []byte(control), 0o644); err != nil {
		a.t.Fatal(err)
	}
	deb := filepath.Join(filepath.Dir(root), name+".deb")
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "--build", root, deb).CombinedOutput(); err != nil {
		a.t.Fatalf("dpkg-deb: %v: %s", err, out)
	}
	a.reprepro("includedeb", suite, deb)
}

// Unsign removes every suite's signatures (InRelease, Release.gpg),
// leaving unsigned Release files.
func (a *AptArchive) Unsign() {
	a.t.Helper()
	for _, suite := range a.Suites {
		for _, f := range []string{"InRelease", "Release.gpg"} {
			if err := os.Remove(filepath.Join(a.Dir, "dists", suite, f)); err != nil {
				a.t.Fatal(err)
			}
		}
	}
}

// Expire rewrites suite's Release file with a Valid-Until an hour past
// (dated now) and signs it again with the archive's key: a
// correctly signed Release file that is no longer valid.
func (a *AptArchive) Expire(suite string) {
	a.t.Helper()
	dist := filepath.Join(a.Dir, "dists", suite)
	data, err := os.ReadFile(filepath.Join(dist, "Release"))
	if err != nil {
		a.t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "Date:") {
			l = "Date: " + time.Now().UTC().Format(time.RFC1123)
			l += "\nValid-Until: " + time.Now().Add(-time.Hour).UTC().Format(time.RFC1123)
		}
		out = append(out, l)
	}
	release := filepath.Join(dist, "Release")
	if err := os.WriteFile(release, []byte(strings.Join(out, "\n")), 0o644); err != nil {
		a.t.Fatal(err)
	}
	for _, f := range []string{"InRelease", "Release.gpg"} {
		os.Remove(filepath.Join(dist, f))
	}
	a.gpg("--armor", "--detach-sign", "--output", filepath.Join(dist, "Release.gpg"), release)
	a.gpg("--clearsign", "--output", filepath.Join(dist, "InRelease"), release)
}

// Corrupt changes one byte of every file of package name in the pool,
// keeping its size: the signed indexes then name a checksum it lacks.
// Calling the function returned undoes it.
func (a *AptArchive) Corrupt(name string) (restore func()) {
	a.t.Helper()
	debs, _ := filepath.Glob(filepath.Join(a.Dir, "pool", "*", "*", name, name+"_*.deb"))
	if len(debs) == 0 {
		a.t.Fatalf("no %s in %s/pool", name, a.Dir)
	}
	flip := func() {
		for _, deb := range debs {
			data, err := os.ReadFile(deb)
			if err != nil {
				a.t.Fatal(err)
			}
			data[len(data)-1] ^= 0xff
			if err := os.WriteFile(deb, data, 0o644); err != nil {
				a.t.Fatal(err)
			}
		}
	}
	flip()
	return flip
}

func (a *AptArchive) gpg(args ...string) string {
	a.t.Helper()
	cmd := exec.Command("gpg", append([]string{"--batch", "--no-tty", "--pinentry-mode", "loopback"}, args...)...)
	cmd.Env = append(os.Environ(), "GNUPGHOME="+a.gnupg)
	out, err := cmd.Output()
	if err != nil {
		a.t.Fatalf("gpg %s: %v%s", strings.Join(args, " "), err, stderr(err))
	}
	return string(out)
}

func (a *AptArchive) reprepro(args ...string) {
	a.t.Helper()
	cmd := exec.Command("reprepro", append([]string{"--basedir", a.Dir}, args...)...)
	cmd.Env = append(os.Environ(), "GNUPGHOME="+a.gnupg)
	if out, err := cmd.CombinedOutput(); err != nil {
		a.t.Fatalf("reprepro %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func stderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return ": " + strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}
