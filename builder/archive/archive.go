// Package archive is kpreload's one door to Debian's archive: it downloads
// pinned packages, unpacks them without installing anything, fetches and
// unpacks whole kernels (FetchKernel: image, headers, kbuild), answers which
// versions a suite carries and lists its kernels, for any suite (bookworm,
// trixie, sid, experimental, ...).
//
// The build host's own apt configuration is never changed. Every suite,
// bookworm included, is read through an apt configuration of kpreload's own
// under <cache>/apt/<suite>/ (its own sources list, package lists, archive
// cache and an empty dpkg status), refreshed when its lists are a day old
// (Refresh forces it), so a package can be downloaded and unpacked but never
// installed, a new upload is seen without the host's apt-get update, and
// the host's apt state stays as it was. Only an archive made with no cache
// directory (New(DefaultSuite, "")) reads the host's own sources and lists.
package archive

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kpreload/kpreload/builder/internal/runner"
	"github.com/kpreload/kpreload/internal/fileutil"
	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/internal/tail"
)

// DefaultSuite is the suite recipes and images use when they name none: the
// build host's own Debian release.
const DefaultSuite = "bookworm"

// DefaultMirror is the Debian archive private configurations read from.
const DefaultMirror = "http://deb.debian.org/debian"

// DefaultSecurityMirror is Debian's security archive.
const DefaultSecurityMirror = "http://deb.debian.org/debian-security"

// DebianKeyring is Debian's archive keyring (package debian-archive-keyring),
// the only keys a private configuration of Debian's own suites trusts.
const DebianKeyring = "/usr/share/keyrings/debian-archive-keyring.gpg"

// debianKeyring is DebianKeyring, a variable so tests can move it.
var debianKeyring = DebianKeyring

// components are the archive components every suite is read with: NVIDIA's
// drivers are in non-free and contrib, its GSP firmware in non-free-firmware.
const components = "main contrib non-free non-free-firmware"

// maxListAge is how old a private configuration's package lists may get
// before Update fetches them again.
const maxListAge = 24 * time.Hour

// Archive reads one Debian suite. Make one with New; it is safe for
// concurrent use.
type Archive struct {
	// Suite is the suite's name, such as "bookworm" or "trixie".
	Suite string
	// Dir is the private apt configuration's root (<cache>/apt/<suite>), or
	// "" when the host's apt sources are used (DefaultSuite with no cache).
	Dir string
	// Mirror and SecurityMirror are the archives a private configuration reads.
	Mirror, SecurityMirror string
	// SignedBy is the OpenPGP key file that signs the mirrors' Release files
	// (apt's signed-by): New sets DebianKeyring for a private configuration;
	// "" (the host's configuration) trusts the host's keyrings. Signatures
	// are checked either way.
	SignedBy string

	// extra is the archive's description when it is not Debian's (NewExtra).
	extra *Extra

	// run runs apt-get, apt-cache and dpkg (nil: runner.Default).
	run runner.Runner

	mu      sync.Mutex
	updated bool
	kernels []string
}

// New returns the archive of suite ("" means DefaultSuite), read through a
// private configuration under cache/apt/<suite>, DefaultSuite's as every
// other's, trusting DebianKeyring alone (New fails without it). With no
// cache ("") DefaultSuite is read through the host's own
// apt sources and lists (which only the host's apt-get update refreshes),
// and any other suite is refused. It checks the name only; nothing is
// fetched until needed.
func New(suite, cache string) (*Archive, error) {
	if suite == "" {
		suite = DefaultSuite
	}
	if err := CheckSuite(suite); err != nil {
		return nil, err
	}
	a := &Archive{Suite: suite, Mirror: DefaultMirror, SecurityMirror: DefaultSecurityMirror}
	switch {
	case cache != "":
		a.Dir = filepath.Join(cache, "apt", suite)
		if _, err := os.Stat(debianKeyring); err != nil {
			return nil, fmt.Errorf("archive %s: Debian's archive keyring, which its private configuration trusts alone (install debian-archive-keyring): %w", suite, err)
		}
		a.SignedBy = debianKeyring
	case suite != DefaultSuite:
		return nil, fmt.Errorf("archive %s: no cache directory for its private apt configuration", suite)
	}
	return a, nil
}

// knownSuites are the suite names (codenames and aliases) Debian's archive
// serves that kpreload knows how to lay out.
var knownSuites = []string{"bookworm", "trixie", "forky", "sid", "unstable", "experimental"}

// CheckSuite reports whether suite is a suite kpreload can read, naming the
// ones it can when it is not.
func CheckSuite(suite string) error {
	if slices.Contains(knownSuites, suite) {
		return nil
	}
	return fmt.Errorf("unknown Debian suite %q: kpreload reads %s", suite, strings.Join(knownSuites, ", "))
}

// SourcesList returns the sources.list lines of a private configuration:
// the suite with its -updates, -security and -backports pockets (sid and
// unstable have none; experimental comes with sid, whose packages it needs).
func (a *Archive) SourcesList() string {
	var b strings.Builder
	opts := ""
	if a.SignedBy != "" {
		opts = "[signed-by=" + a.SignedBy + "] "
	}
	line := func(uri, suite string) {
		fmt.Fprintf(&b, "deb %s%s %s %s\n", opts, uri, suite, components)
	}
	switch a.Suite {
	case "sid", "unstable":
		line(a.Mirror, "sid")
	case "experimental":
		line(a.Mirror, "sid")
		line(a.Mirror, "experimental")
	default:
		line(a.Mirror, a.Suite)
		line(a.Mirror, a.Suite+"-updates")
		line(a.SecurityMirror, a.Suite+"-security")
		line(a.Mirror, a.Suite+"-backports")
	}
	return b.String()
}

// aptOptions returns the -o options that point apt at the private
// configuration (none for the host's). Dir::Cache::pkgcache names the binary
// package cache, which hosts built from Debian's container images turn off
// (their docker-clean sets it to ""): without it every apt-cache call parses
// all of a suite's package lists again (1.7 CPU-seconds for bookworm,
// against 0.1 with the cache; apt rebuilds it when the lists change and
// writes it through a temporary file and a rename).
func (a *Archive) aptOptions() []string {
	if a.Dir == "" {
		return nil
	}
	return []string{
		"-o", "Dir::Etc::SourceList=" + filepath.Join(a.Dir, "sources.list"),
		"-o", "Dir::Etc::SourceParts=" + filepath.Join(a.Dir, "sources.list.d"),
		"-o", "Dir::Etc::Preferences=" + filepath.Join(a.Dir, "preferences"),
		"-o", "Dir::Etc::PreferencesParts=" + filepath.Join(a.Dir, "preferences.d"),
		"-o", "Dir::State::Lists=" + filepath.Join(a.Dir, "lists"),
		"-o", "Dir::State::status=" + filepath.Join(a.Dir, "status"),
		"-o", "Dir::Cache=" + filepath.Join(a.Dir, "cache"),
		"-o", "Dir::Cache::pkgcache=pkgcache.bin",
		"-o", "APT::Get::List-Cleanup=0",
		"-o", "Debug::NoLocking=1",
	}
}

// AptOptions returns the -o options for apt-get and apt-cache that read this
// suite (nil for the host's own), after making sure the private package
// lists exist and are fresh. The scripts' scripts/lib.sh apt_suite_opts
// prints the same options.
func (a *Archive) AptOptions(ctx context.Context) ([]string, error) {
	if err := a.Update(ctx, false); err != nil {
		return nil, err
	}
	return a.aptOptions(), nil
}

// Update writes the private configuration and runs apt-get update for it
// when its lists are missing, older than a day, or force is set. It does
// nothing for the host's configuration (an archive made with no cache).
func (a *Archive) Update(ctx context.Context, force bool) error {
	if a.Dir == "" {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.updated && !force {
		return nil
	}
	for _, d := range []string{"sources.list.d", "preferences.d", "lists/partial", "cache/archives/partial"} {
		if err := os.MkdirAll(filepath.Join(a.Dir, d), 0o755); err != nil {
			return fmt.Errorf("archive %s: %w", a.Suite, err)
		}
	}
	unlock, err := lockDir(ctx, a.Dir)
	if err != nil {
		return fmt.Errorf("archive %s: %w", a.Suite, err)
	}
	defer unlock()
	sources := filepath.Join(a.Dir, "sources.list")
	list := a.SourcesList()
	if a.extra != nil {
		key, err := a.installKey()
		if err != nil {
			return err
		}
		list = a.extraSources(key)
	}
	want := "# kpreload's private apt configuration for " + a.Suite + " (never used to install)\n" + list
	changed := true
	if old, err := inroot.ReadPath(sources, inroot.MaxText); err == nil && string(old) == want {
		changed = false
	}
	if changed {
		if err := fileutil.WriteAtomic(sources, []byte(want), 0o644, false); err != nil {
			return fmt.Errorf("archive %s: %w", a.Suite, err)
		}
	}
	status := filepath.Join(a.Dir, "status")
	if _, err := os.Stat(status); err != nil {
		if err := fileutil.WriteAtomic(status, nil, 0o644, false); err != nil {
			return fmt.Errorf("archive %s: %w", a.Suite, err)
		}
	}
	stamp := filepath.Join(a.Dir, "updated")
	if fi, err := os.Stat(stamp); err == nil && !changed && !force && time.Since(fi.ModTime()) < maxListAge {
		a.updated = true
		return nil
	}
	// A failed update must not leave the last good stamp behind.
	if err := os.Remove(stamp); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("archive %s: %w", a.Suite, err)
	}
	if err := backdateReleases(filepath.Join(a.Dir, "lists")); err != nil {
		return fmt.Errorf("archive %s: %w", a.Suite, err)
	}
	args := append(a.aptOptions(), "update", "-q")
	out, err := runner.Or(a.run).Run(ctx, runner.Cmd{Name: "apt-get", Args: args, Combined: true})
	err, _ = ended(err)
	if sigErr := a.signatureError(out); sigErr != nil {
		return sigErr
	}
	if err != nil {
		return fmt.Errorf("archive %s: apt-get update of kpreload's private configuration %s: %w: %s", a.Suite, a.Dir, err, lastLines(out, 5))
	}
	if bytes.Contains(out, []byte("Err:")) {
		return fmt.Errorf("archive %s: apt-get update could not read every source of %s: %s", a.Suite, sources, lastLines(grepLines(out, "Err:"), 5))
	}
	if err := fileutil.WriteAtomic(stamp, []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644, false); err != nil {
		return fmt.Errorf("archive %s: %w", a.Suite, err)
	}
	a.updated = true
	a.kernels = nil
	return nil
}

// aptCache runs apt-cache with the suite's private configuration (updating
// its lists first when they are stale) and returns what it printed; an error
// names the suite, the command and apt-cache's own words.
func (a *Archive) aptCache(ctx context.Context, args ...string) ([]byte, error) {
	if err := a.Update(ctx, false); err != nil {
		return nil, err
	}
	out, err := runner.Or(a.run).Run(ctx, runner.Cmd{Name: "apt-cache", Args: append(a.aptOptions(), args...)})
	if err != nil {
		err, words := ended(err)
		return nil, fmt.Errorf("archive %s: apt-cache %s: %w%s", a.Suite, strings.Join(args, " "), err, words)
	}
	return out, nil
}

// Versions returns the versions of package name the suite carries, newest
// first as apt orders them, or none.
func (a *Archive) Versions(ctx context.Context, name string) ([]string, error) {
	out, err := a.aptCache(ctx, "madison", name)
	if err != nil {
		return nil, err
	}
	return parseMadison(out, name), nil
}

// VersionsOf is Versions for many packages with one apt-cache call: it maps
// each name to the versions the suite carries (absent names map to none).
func (a *Archive) VersionsOf(ctx context.Context, names ...string) (map[string][]string, error) {
	out, err := a.aptCache(ctx, append([]string{"madison"}, names...)...)
	if err != nil {
		return nil, err
	}
	got := map[string][]string{}
	for _, n := range names {
		got[n] = parseMadison(out, n)
	}
	return got, nil
}

// parseMadison reads "apt-cache madison" lines ("name | version | source")
// and returns the distinct versions of name in order.
func parseMadison(out []byte, name string) []string {
	var versions []string
	// Every line counts: a bufio.Scanner would stop, silently, at the first
	// line longer than its 64 KiB limit and drop the versions after it.
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Split(line, "|")
		if len(f) < 3 || strings.TrimSpace(f[0]) != name {
			continue
		}
		v := strings.TrimSpace(f[1])
		if v != "" && !slices.Contains(versions, v) {
			versions = append(versions, v)
		}
	}
	return versions
}

// NotCarriedError says that a suite does not carry a pinned package version.
type NotCarriedError struct {
	// Suite, Name and Version are what was asked for.
	Suite, Name, Version string
	// Has are the versions of Name the suite does carry (none if it has no such package).
	Has []string
}

// Error names the package, the suite and what the suite has.
func (e *NotCarriedError) Error() string {
	if len(e.Has) == 0 {
		return fmt.Sprintf("%s=%s: suite %s has no package %s", e.Name, e.Version, e.Suite, e.Name)
	}
	return fmt.Sprintf("%s=%s: suite %s does not carry version %s; it has %s", e.Name, e.Version, e.Suite, e.Version, strings.Join(e.Has, ", "))
}

// Check returns a *NotCarriedError when the suite does not carry name=version.
func (a *Archive) Check(ctx context.Context, name, version string) error {
	has, err := a.Versions(ctx, name)
	if err != nil {
		return err
	}
	if slices.Contains(has, version) {
		return nil
	}
	// A list older than the archive may miss a new upload: look once more.
	if a.Dir != "" {
		if err := a.Update(ctx, true); err != nil {
			return err
		}
		if has, err = a.Versions(ctx, name); err != nil {
			return err
		}
		if slices.Contains(has, version) {
			return nil
		}
	}
	return &NotCarriedError{Suite: a.Suite, Name: name, Version: version, Has: has}
}

// DebFileName is the name apt gives a package's .deb ("name_version_arch.deb",
// an epoch's ':' written "%3a"). A name, version and architecture identify
// one file in every suite of the archive, so downloads are shared by suites.
func DebFileName(name, version, arch string) string {
	return name + "_" + strings.ReplaceAll(version, ":", "%3a") + "_" + arch + ".deb"
}

// Download returns the .deb of name=version in dir, fetching it from the
// suite with apt-get download when dir does not have it. A version the suite
// does not carry is refused first with a *NotCarriedError. The file appears
// under its final name only once complete.
func (a *Archive) Download(ctx context.Context, name, version, dir string) (string, error) {
	if found, _ := filepath.Glob(filepath.Join(dir, DebFileName(name, version, "*"))); len(found) > 0 {
		return found[0], nil
	}
	if err := a.Check(ctx, name, version); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("download %s=%s: %w", name, version, err)
	}
	tmp, err := os.MkdirTemp(dir, ".tmp-download-")
	if err != nil {
		return "", fmt.Errorf("download %s=%s: %w", name, version, err)
	}
	defer os.RemoveAll(tmp)
	args := append(a.aptOptions(), "download", "-q", name+"="+version)
	if _, err := runner.Or(a.run).Run(ctx, runner.Cmd{Name: "apt-get", Args: args, Dir: tmp}); err != nil {
		err, words := ended(err)
		return "", fmt.Errorf("apt-get download %s=%s from %s: %w%s", name, version, a.Suite, err, words)
	}
	got, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if len(got) != 1 {
		return "", fmt.Errorf("apt-get download %s=%s from %s left %d .deb files, want 1", name, version, a.Suite, len(got))
	}
	dest := filepath.Join(dir, filepath.Base(got[0]))
	if err := fileutil.Publish(got[0], dest); err != nil {
		return "", fmt.Errorf("download %s=%s: %w", name, version, err)
	}
	return dest, nil
}

// Unpack returns sources/<name>_<version>: the package's files unpacked with
// dpkg -x (no maintainer scripts, nothing registered with dpkg), downloading
// the .deb into debs first when needed. The tree is unpacked into a
// temporary directory and renamed into place: it is complete or absent.
func (a *Archive) Unpack(ctx context.Context, name, version, debs, sources string) (string, error) {
	dest := filepath.Join(sources, name+"_"+strings.ReplaceAll(version, ":", "%3a"))
	if _, err := os.Stat(dest); err == nil {
		return dest, nil
	}
	deb, err := a.Download(ctx, name, version, debs)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(sources, 0o755); err != nil {
		return "", fmt.Errorf("unpack %s: %w", deb, err)
	}
	tmp, err := os.MkdirTemp(sources, ".tmp-"+name+"-")
	if err != nil {
		return "", fmt.Errorf("unpack %s: %w", deb, err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	if err := Extract(ctx, deb, tmp); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("unpack %s: %w", deb, err)
	}
	if err := os.Rename(tmp, dest); err != nil {
		// Another build may have unpacked it meanwhile.
		if _, statErr := os.Stat(dest); statErr == nil {
			return dest, nil
		}
		return "", fmt.Errorf("unpack %s: %w", deb, err)
	}
	return dest, nil
}

// Extract unpacks a .deb's files into dir with dpkg -x.
func Extract(ctx context.Context, deb, dir string) error {
	return ExtractWith(ctx, runner.Default, deb, dir)
}

// ExtractWith is Extract with dpkg run by r.
func ExtractWith(ctx context.Context, r runner.Runner, deb, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("dpkg -x %s: %w", deb, err)
	}
	if _, err := r.Run(ctx, runner.Cmd{Name: "dpkg", Args: []string{"-x", deb, dir}}); err != nil {
		err, words := ended(err)
		return fmt.Errorf("dpkg -x %s: %w%s", deb, err, words)
	}
	return nil
}

// ended splits a program's failure (runner.Runner) into how it ended and
// ": " with the end of its output, for messages that name the command
// themselves.
func ended(err error) (error, string) {
	var re *runner.Error
	if !errors.As(err, &re) {
		return err, ""
	}
	if len(re.Tail) == 0 {
		return re.Err, ""
	}
	lines := slices.Clone(re.Tail)
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return re.Err, ": " + strings.Join(lines, "; ")
}

// lastLines returns the last n non-empty lines of out, trimmed, joined by "; ".
func lastLines(out []byte, n int) string {
	lines := tail.Lines(string(out), n)
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return strings.Join(lines, "; ")
}

// grepLines returns the lines of out that contain s.
func grepLines(out []byte, s string) []byte {
	var b bytes.Buffer
	for _, l := range bytes.Split(out, []byte("\n")) {
		if bytes.Contains(l, []byte(s)) {
			b.Write(l)
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

// Search returns the names of the suite's packages whose name matches the
// extended regular expression pattern (apt-cache search --names-only).
func (a *Archive) Search(ctx context.Context, pattern string) ([]string, error) {
	out, err := a.aptCache(ctx, "search", "--names-only", pattern)
	if err != nil {
		return nil, err
	}
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if name, _, _ := strings.Cut(sc.Text(), " "); name != "" {
			names = append(names, name)
		}
	}
	return names, nil
}

// DefaultCache is where downloads and private apt configurations live when
// no cache is named: /var/cache/kpreload (commands name $KPRELOAD_CACHE
// instead when it is set).
func DefaultCache() string {
	return "/var/cache/kpreload"
}

// KernelSuite guesses the suite that carries a Debian kernel release from
// its ABI name, for kernels named without a suite: "+deb13" is trixie,
// "+deb14" forky, and anything else (6.1.0-N, "+deb12" backports) bookworm.
func KernelSuite(release string) string {
	switch {
	case strings.Contains(release, "+deb13"):
		return "trixie"
	case strings.Contains(release, "+deb14"):
		return "forky"
	}
	return DefaultSuite
}

// backdateReleases moves the modification time of every Release file apt
// keeps in lists (InRelease, Release, Release.gpg) one second back. apt sets
// a fetched file's time to the server's Last-Modified and asks again with
// If-Modified-Since that time; Last-Modified counts whole seconds, so an
// archive that re-signs a suite within the second of the copy apt holds (an
// upload right after a cycle read the lists) answers "304 Not Modified" and
// the upload goes unseen until the suite changes again. A second earlier, the
// server sends the Release file whenever it is not older than the copy; the
// Packages indexes it lists are fetched only when their hashes changed.
func backdateReleases(lists string) error {
	files, err := filepath.Glob(filepath.Join(lists, "*Release*"))
	if err != nil {
		return fmt.Errorf("package lists: %w", err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		if !strings.HasSuffix(name, "_InRelease") && !strings.HasSuffix(name, "_Release") && !strings.HasSuffix(name, "_Release.gpg") {
			continue
		}
		fi, err := os.Lstat(f)
		if err != nil || !fi.Mode().IsRegular() {
			continue // gone, or not apt's: apt fetches it again
		}
		t := fi.ModTime().Add(-time.Second)
		if err := os.Chtimes(f, t, t); err != nil {
			return fmt.Errorf("package lists: %w", err)
		}
	}
	return nil
}
