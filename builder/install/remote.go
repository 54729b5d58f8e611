package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/kmodcache/cellsign"
	"github.com/kpreload/kpreload/kmodcache/remote"
	"github.com/kpreload/kpreload/kmodcache/store"
)

// RemoteFile is a root's registry configuration, relative to the root: where
// the kernel hook pulls the driver cells of a newly installed kernel from.
const RemoteFile = "etc/kpreload/remote.yaml"

// DefaultPullTimeout bounds the kernel hook's whole pull.
const DefaultPullTimeout = 5 * time.Minute

// RemoteConfig is RemoteFile:
//
//	remote: oci://registry.example.com/gpu/kpreload-cells
//	plain_http: false                          # a registry on plain HTTP
//	credentials: /etc/kpreload/registry.json   # Docker config.json style
//	trust: [/etc/kpreload/keys/builders.pub]   # cells must be signed by one of these
//	timeout: 5m                                # the whole pull
//
// Paths are inside the root. Without trust keys nothing is pulled unless
// allow_unsigned is true: the hook's pull decides what the kernel loads.
type RemoteConfig struct {
	Remote        string   `yaml:"remote"`
	PlainHTTP     bool     `yaml:"plain_http,omitempty"`
	Credentials   string   `yaml:"credentials,omitempty"`
	Trust         []string `yaml:"trust,omitempty"`
	Timeout       string   `yaml:"timeout,omitempty"`
	AllowUnsigned bool     `yaml:"allow_unsigned,omitempty"`

	timeout time.Duration
}

// ParseRemoteConfig reads and checks a RemoteConfig.
func ParseRemoteConfig(b []byte) (*RemoteConfig, error) {
	var c RemoteConfig
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if _, err := remote.Parse(c.Remote); err != nil {
		return nil, err
	}
	if len(c.Trust) == 0 && !c.AllowUnsigned {
		return nil, fmt.Errorf("no trust keys: list the builders' public keys under trust (or set allow_unsigned: true to take unsigned cells)")
	}
	for _, p := range append(append([]string{}, c.Trust...), c.Credentials) {
		if p != "" && !filepath.IsAbs(p) {
			return nil, fmt.Errorf("%q: want an absolute path inside the root", p)
		}
	}
	c.timeout = DefaultPullTimeout
	if c.Timeout != "" {
		d, err := time.ParseDuration(c.Timeout)
		if err != nil || d <= 0 || d > time.Hour {
			return nil, fmt.Errorf("timeout %q: want a duration up to 1h, such as 5m", c.Timeout)
		}
		c.timeout = d
	}
	return &c, nil
}

// ReadRemoteConfig reads root's RemoteFile; (nil, nil) when there is none.
func ReadRemoteConfig(root string) (*RemoteConfig, error) {
	p := inroot.Host(root, RemoteFile)
	b, err := inroot.ReadFile(root, RemoteFile, 64<<10)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("remote configuration: %w", err)
	}
	c, err := ParseRemoteConfig(b)
	if err != nil {
		return nil, fmt.Errorf("remote configuration %s: %w", p, err)
	}
	return c, nil
}

// driverKey names a driver set regardless of its kernel.
type driverKey struct{ driver, version, flavor string }

// pullCells pulls, from the root's registry, the cells of kernel for every
// driver the root's cache holds for its other kernels: found by the
// registry's listing, each verified as build --pull-only verifies (the
// signature against the trusted keys, every blob's digest, every module's
// metadata re-derived) before it enters the root's cache. It returns what it
// pulled; a cell it could not use is a warning, not an error: the kernel
// still gets its boot entry, without the driver.
func (o *Options) pullCells(ctx context.Context, cfg *RemoteConfig, kernel string) (pulled, warnings []string) {
	want := map[driverKey]bool{}
	idx, _ := inroot.Glob(o.Root, path.Join(CacheDir, bootindex.IndexDir, "*.json"))
	for _, p := range idx {
		ix, err := ReadIndex(o.Root, strings.TrimSuffix(path.Base(p), ".json"))
		if err != nil || ix.Kernel == kernel {
			continue
		}
		for _, s := range ix.Sets {
			if s.ID != bootindex.KernelSetID {
				want[driverKey{s.Driver, s.Version, s.Flavor}] = true
			}
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	warn := func(format string, a ...any) []string {
		return []string{fmt.Sprintf("registry %s: ", cfg.Remote) + fmt.Sprintf(format, a...)}
	}
	// Credentials only from the configuration (a hook runs with no home).
	// Read inside the root (regular files, bounded), handed to the readers
	// that take a path as copies.
	tmp, err := os.MkdirTemp("", "kpreload-hook-")
	if err != nil {
		return nil, warn("%v", err)
	}
	defer os.RemoveAll(tmp)
	creds := "etc/kpreload/registry-auth.json"
	if cfg.Credentials != "" {
		creds = cfg.Credentials
	}
	ro := remote.Options{PlainHTTP: cfg.PlainHTTP}
	if ro.DockerConfig, err = copyOut(o.Root, creds, tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, warn("credentials: %v", err)
	}
	if len(cfg.Trust) > 0 {
		paths := make([]string, len(cfg.Trust))
		for i, p := range cfg.Trust {
			if paths[i], err = copyOut(o.Root, p, tmp); err != nil {
				return nil, warn("trusted keys: %v", err)
			}
		}
		t, err := cellsign.LoadTrust(paths...)
		if err != nil {
			return nil, warn("trusted keys: %v", err)
		}
		ro.Trust = t
	}
	r, err := remote.Open(cfg.Remote, ro)
	if err != nil {
		return nil, warn("%v", err)
	}
	// Every file of the root's cache is written resolved inside the root.
	st, err := store.OpenIn(o.Root, CacheDir)
	if err != nil {
		return nil, warn("the root's cache: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	o.logf("looking for the driver cells of %s in %s", kernel, cfg.Remote)
	recs, refused, err := r.List(ctx)
	if err != nil {
		return nil, warn("list the cells: %v", err)
	}
	for i, f := range refused {
		if i == 3 {
			warnings = append(warnings, warn("%d more cells refused", len(refused)-i)...)
			break
		}
		warnings = append(warnings, warn("refused %v", f)...)
	}
	// The newest signed cell of each driver, and only it: a registry that
	// offers an older one than this cache has seen, or hides the newest,
	// is warned about and nothing of that driver is pulled.
	newest, rollbacks, err := r.Select(st, recs, func(id remote.Identity) bool {
		return id.Kernel == kernel && want[driverKey{id.Driver, id.Version, id.Flavor}]
	})
	if err != nil {
		return nil, warn("%v", err)
	}
	found := map[driverKey]bool{}
	for _, err := range rollbacks {
		warnings = append(warnings, warn("%v", err)...)
	}
	for _, rec := range newest {
		k := driverKey{rec.Driver, rec.Version, rec.Flavor}
		res, err := r.PullRecord(ctx, st, rec, false)
		if err != nil {
			warnings = append(warnings, warn("pull %s %s for %s: %v", rec.Driver, rec.Version, kernel, err)...)
			continue
		}
		found[k] = true
		signer := "unsigned"
		switch rec.Trust {
		case remote.TrustVerified:
			signer = "signed by " + rec.Signer
		case remote.TrustUnverified:
			signer = "signed by " + rec.Signer + ", not verified"
		}
		if rec.Trust != remote.TrustVerified {
			warnings = append(warnings, warn("%s %s %s for %s: taken %s (allow_unsigned)", rec.Driver, rec.Version, rec.Flavor, kernel, signer)...)
		}
		pulled = append(pulled, fmt.Sprintf("%s %s %s (set %.12s, %s)", rec.Driver, rec.Version, rec.Flavor, res.SetID, signer))
	}
	var missing []string
	for k := range want {
		if !found[k] {
			missing = append(missing, strings.TrimSpace(k.driver+" "+k.version+" "+k.flavor))
		}
	}
	if len(missing) > 0 {
		warnings = append(warnings, warn("no usable cell for %s of %s", kernel, strings.Join(missing, ", "))...)
	}
	return pulled, warnings
}

// StageRemoteConfig puts the registry configuration file src (whose trust
// keys and credentials are paths on this machine) into root: the keys under
// /etc/kpreload/keys/ (each under its own file name; keys whose names are
// the same get distinct ones, "team.pub", "team-2.pub"; the keys must load
// as trusted keys, a key given twice refused), the credentials as /etc/kpreload/registry-auth.json
// (mode 0600), and RemoteFile naming them inside the root.
func StageRemoteConfig(src, root string) error {
	b, err := inroot.ReadPath(src, inroot.MaxText)
	if err != nil {
		return fmt.Errorf("remote configuration: %w", err)
	}
	var c RemoteConfig
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return fmt.Errorf("remote configuration %s: %w", src, err)
	}
	base := filepath.Dir(src)
	host := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(base, p)
	}
	put := func(from, to string, mode os.FileMode) error {
		if err := inroot.MkdirAll(root, path.Dir(to), 0o755); err != nil {
			return err
		}
		return inroot.CopyFile(root, to, host(from), mode)
	}
	hostKeys := make([]string, len(c.Trust))
	for i, k := range c.Trust {
		hostKeys[i] = host(k)
	}
	if len(hostKeys) > 0 {
		if _, err := cellsign.LoadTrust(hostKeys...); err != nil {
			return fmt.Errorf("remote configuration %s: %w", src, err)
		}
	}
	names := stagedKeyNames(c.Trust)
	for i, k := range c.Trust {
		to := "etc/kpreload/keys/" + names[i]
		if err := put(k, to, 0o644); err != nil {
			return fmt.Errorf("remote configuration %s: trusted key: %w", src, err)
		}
		c.Trust[i] = "/" + to
	}
	if c.Credentials != "" {
		if err := put(c.Credentials, "etc/kpreload/registry-auth.json", 0o600); err != nil {
			return fmt.Errorf("remote configuration %s: credentials: %w", src, err)
		}
		c.Credentials = "/etc/kpreload/registry-auth.json"
	}
	out, err := yaml.Marshal(&c)
	if err != nil {
		return err
	}
	out = append([]byte("# kpreload: where the kernel hook pulls the driver cells of new kernels from (see kpreload kernel-hook --help)\n"), out...)
	if _, err := ParseRemoteConfig(out); err != nil {
		return fmt.Errorf("remote configuration %s: %w", src, err)
	}
	if err := inroot.MkdirAll(root, path.Dir(RemoteFile), 0o755); err != nil {
		return err
	}
	return inroot.WriteFile(root, RemoteFile, out, 0o644)
}

// copyOut copies the regular file p of root (at most 1 MiB, read inside
// root) into the directory dir and returns the copy's path; a missing file
// gives a path that does not exist, and the error.
func copyOut(root, p, dir string) (string, error) {
	ents, _ := os.ReadDir(dir)
	out := filepath.Join(dir, fmt.Sprintf("%d-%s", len(ents), path.Base(p)))
	b, err := inroot.ReadFile(root, p, 1<<20)
	if err != nil {
		return out, err
	}
	return out, os.WriteFile(out, b, 0o600)
}

// stagedKeyNames gives each trusted key file its base name in the image,
// made distinct where two share one: "team.pub", then "team-2.pub", ...
func stagedKeyNames(keys []string) []string {
	names := make([]string, len(keys))
	taken := map[string]bool{}
	for i, k := range keys {
		base := filepath.Base(k)
		ext := filepath.Ext(base)
		stem := strings.TrimSuffix(base, ext)
		name := base
		for n := 2; taken[name]; n++ {
			name = fmt.Sprintf("%s-%d%s", stem, n, ext)
		}
		taken[name] = true
		names[i] = name
	}
	return names
}
