package archive

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/kpreload/kpreload/internal/fileutil"
	"github.com/kpreload/kpreload/internal/inroot"
)

// Extra is an apt archive besides Debian's (NVIDIA's CUDA repository, a
// team's mirror): read through a private apt configuration of its own under
// <cache>/apt/extra-<name>-<id>/, its Release files checked against Key only
// (apt's signed-by). An unsigned archive, or one signed by another key, is
// refused.
type Extra struct {
	// Name identifies the archive in recipes (source.select.suites), such as "cuda".
	Name string `yaml:"name"`
	// URL is the archive's root, such as "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64".
	URL string `yaml:"url"`
	// Suites are the archive's suites (dists/<suite>), such as "stable", or
	// for a flat archive (NVIDIA's CUDA repository) its directory, "/".
	Suites []string `yaml:"suites"`
	// Components are the components read from each suite, such as "main"
	// (none for a flat archive).
	Components []string `yaml:"components"`
	// Key is the OpenPGP public key file (armored or binary) that signs the
	// archive's Release files.
	Key string `yaml:"key"`
	// KeyData, when set, is Key's content as read (confined) when the
	// recipe was loaded: what the archive trusts, never Key read again.
	KeyData []byte `yaml:"-"`
}

var (
	extraNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)
	aptWordRE   = regexp.MustCompile(`^[A-Za-z0-9./][A-Za-z0-9._/+-]*$`)
)

// Check reports what is wrong with the archive's fields, naming each; it
// does not read the key file.
func (e Extra) Check() error {
	var errs []error
	switch {
	case e.Name == "":
		errs = append(errs, errors.New("name: missing; name the archive, such as cuda"))
	case !extraNameRE.MatchString(e.Name):
		errs = append(errs, fmt.Errorf("name: %q: use lower case letters, digits, '.', '_' and '-'", e.Name))
	case slices.Contains(knownSuites, e.Name):
		errs = append(errs, fmt.Errorf("name: %q is a Debian suite; name the archive otherwise", e.Name))
	}
	if !strings.HasPrefix(e.URL, "http://") && !strings.HasPrefix(e.URL, "https://") || strings.ContainsAny(e.URL, " \t\n[]") {
		errs = append(errs, fmt.Errorf("url: %q: want an http:// or https:// URL", e.URL))
	}
	if len(e.Suites) == 0 {
		errs = append(errs, errors.New("suites: missing; list the archive's suites, such as [stable]"))
	}
	for i, s := range e.Suites {
		if !aptWordRE.MatchString(s) {
			errs = append(errs, fmt.Errorf("suites[%d]: %q is not a suite name", i, s))
		}
	}
	flat := len(e.Suites) > 0 && !slices.ContainsFunc(e.Suites, func(s string) bool { return !strings.HasSuffix(s, "/") })
	if len(e.Components) == 0 && !flat {
		errs = append(errs, errors.New("components: missing; list the components to read, such as [main]"))
	}
	for i, c := range e.Components {
		if !aptWordRE.MatchString(c) {
			errs = append(errs, fmt.Errorf("components[%d]: %q is not a component name", i, c))
		}
	}
	if e.Key == "" {
		errs = append(errs, errors.New("key: missing; give the file of the OpenPGP key that signs the archive (signatures are always checked)"))
	}
	return errors.Join(errs...)
}

// NewExtra returns the archive e, read through a private apt configuration
// under cache/apt/extra-<name>-<id>, id a digest of its URL, suites,
// components and key, so two archives called by one name (a recipe's own and
// a shared archives.yaml's) never share package lists. Nothing is fetched
// until needed.
func NewExtra(e Extra, cache string) (*Archive, error) {
	if err := e.Check(); err != nil {
		return nil, fmt.Errorf("archive %s: %w", e.Name, err)
	}
	if cache == "" {
		return nil, fmt.Errorf("archive %s: no cache directory for its private apt configuration", e.Name)
	}
	x := e
	x.Suites, x.Components, x.KeyData = slices.Clone(e.Suites), slices.Clone(e.Components), bytes.Clone(e.KeyData)
	return &Archive{Suite: e.Name, Dir: filepath.Join(cache, "apt", "extra-"+e.Name+"-"+e.id()), Mirror: e.URL, extra: &x}, nil
}

// id is a short digest of everything that names the archive but its name.
func (e Extra) id() string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%q %q %q %q", e.URL, e.Suites, e.Components, e.Key)))
	return hex.EncodeToString(sum[:6])
}

// keyFile is where a private configuration keeps its copy of an extra
// archive's key: apt reads armored keys only from files named .asc.
func (a *Archive) keyFile(armored bool) string {
	if armored {
		return filepath.Join(a.Dir, "signed-by.asc")
	}
	return filepath.Join(a.Dir, "signed-by.gpg")
}

// MaxKeySize bounds an extra archive's key file: a public key with its
// signatures is a few kilobytes.
const MaxKeySize = 1 << 20

// installKey copies the extra archive's key (KeyData, else Key read now) into the private configuration
// and returns the path its sources name in signed-by.
func (a *Archive) installKey() (string, error) {
	// The recipe names the file: a regular file of a key's size, never a
	// FIFO or a device that would block or never end.
	data := a.extra.KeyData
	if data == nil {
		var err error
		if data, err = inroot.ReadPath(a.extra.Key, MaxKeySize); err != nil {
			return "", fmt.Errorf("archive %s: key: %w", a.Suite, err)
		}
	}
	if len(data) == 0 {
		return "", fmt.Errorf("archive %s: key: %s is empty", a.Suite, a.extra.Key)
	}
	armored := bytes.HasPrefix(bytes.TrimSpace(data), []byte("-----BEGIN PGP PUBLIC KEY BLOCK-----"))
	dest := a.keyFile(armored)
	if old, err := inroot.ReadPath(dest, MaxKeySize); err == nil && bytes.Equal(old, data) {
		return dest, nil
	}
	// A new key invalidates what the old one let through.
	os.Remove(filepath.Join(a.Dir, "updated"))
	if err := fileutil.WriteAtomic(dest, data, 0o644, false); err != nil {
		return "", fmt.Errorf("archive %s: key: %w", a.Suite, err)
	}
	os.Remove(a.keyFile(!armored))
	return dest, nil
}

// extraSources returns the sources.list of an extra archive, every line
// signed-by its key.
func (a *Archive) extraSources(key string) string {
	var b strings.Builder
	for _, s := range a.extra.Suites {
		// check-valid-until, check-date: a Release file past its Valid-Until
		// (or dated in the future) is refused, whatever the host's apt
		// configuration says.
		fmt.Fprintf(&b, "deb [signed-by=%s check-valid-until=yes check-date=yes] %s %s %s\n", key, a.Mirror, s, strings.Join(a.extra.Components, " "))
	}
	return b.String()
}

// signatureError says, in words, that apt refused an extra archive's
// Release file, or returns nil when its output shows no such refusal.
func (a *Archive) signatureError(out []byte) error {
	if a.extra == nil {
		return nil
	}
	if bytes.Contains(out, []byte("is expired")) {
		return fmt.Errorf("archive %s (%s): its Release file is past its Valid-Until (apt: %s); nothing is read from an archive whose Release file has expired", a.Suite, a.Mirror, lastLines(grepAny(out, "is expired"), 3))
	}
	for _, mark := range []string{"NO_PUBKEY", "is not signed", "GPG error", "BADSIG", "EXPKEYSIG", "signatures were invalid", "couldn't be verified"} {
		if bytes.Contains(out, []byte(mark)) {
			return fmt.Errorf("archive %s (%s): its Release file is not signed by the key %s (apt: %s); nothing is read from an archive whose signature does not check", a.Suite, a.Mirror, a.extra.Key, lastLines(grepAny(out, "NO_PUBKEY", "not signed", "GPG error", "BADSIG", "EXPKEYSIG", "invalid", "verified"), 3))
		}
	}
	return nil
}

// grepAny returns the lines of out that contain any of marks.
func grepAny(out []byte, marks ...string) []byte {
	var b bytes.Buffer
	for _, l := range bytes.Split(out, []byte("\n")) {
		for _, m := range marks {
			if bytes.Contains(l, []byte(m)) {
				b.Write(l)
				b.WriteByte('\n')
				break
			}
		}
	}
	return b.Bytes()
}

// Carried is one version of a package an archive carries.
type Carried struct {
	// Version is the Debian version, such as "550.163.01-2".
	Version string
	// Suite is the suite (pocket) that lists it, such as "trixie-backports"
	// or, for an extra archive, one of its suites.
	Suite string
	// Published is the Date of that suite's Release file as the last
	// update fetched it: the package was published at or before it. Zero
	// when the metadata has no date.
	Published time.Time
}

// Carried returns every version of package name the archive carries, with
// the suite that lists it, newest first as apt orders them.
func (a *Archive) Carried(ctx context.Context, name string) ([]Carried, error) {
	out, err := a.aptCache(ctx, "madison", name)
	if err != nil {
		return nil, err
	}
	var got []Carried
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Split(line, "|")
		if len(f) < 3 || strings.TrimSpace(f[0]) != name {
			continue
		}
		c := Carried{Version: strings.TrimSpace(f[1])}
		// " http://deb.debian.org/debian trixie-backports/contrib amd64 Packages"
		if w := strings.Fields(f[2]); len(w) >= 2 {
			c.Suite, _, _ = strings.Cut(w[1], "/")
			c.Published = a.releaseDate(w[0], c.Suite)
		}
		if c.Version != "" && !slices.Contains(got, c) {
			got = append(got, c)
		}
	}
	return got, nil
}

// releaseDate reads the Date of suite's Release file from the package lists
// apt keeps for uri (zero when it has none).
func (a *Archive) releaseDate(uri, suite string) time.Time {
	lists := "/var/lib/apt/lists"
	if a.Dir != "" {
		lists = filepath.Join(a.Dir, "lists")
	}
	// apt names list files after the URI: scheme dropped, '/' as '_' (and
	// by some versions ':' quoted as %3a).
	base := uri
	if _, rest, ok := strings.Cut(base, "://"); ok {
		base = rest
	}
	base = strings.ReplaceAll(strings.TrimSuffix(base, "/"), "/", "_") + "_dists_" + strings.ReplaceAll(suite, "/", "_")
	for _, b := range []string{base, strings.ReplaceAll(base, ":", "%3a")} {
		for _, name := range []string{b + "_InRelease", b + "_Release"} {
			data, err := inroot.ReadPath(filepath.Join(lists, name), inroot.MaxLarge)
			if err != nil {
				continue
			}
			if t, ok := releaseFileDate(data); ok {
				return t
			}
		}
	}
	return time.Time{}
}

// releaseFileDate reads the Date field of a Release or InRelease file.
func releaseFileDate(data []byte) (time.Time, bool) {
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "-----BEGIN PGP SIGNATURE") {
			break
		}
		if v, ok := strings.CutPrefix(l, "Date:"); ok {
			for _, layout := range []string{time.RFC1123, time.RFC1123Z} {
				if t, err := time.Parse(layout, strings.TrimSpace(v)); err == nil {
					return t.UTC(), true
				}
			}
		}
	}
	return time.Time{}, false
}
