package install

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/kpreload/kpreload/kmodcache/remote"
)

// parseRemoteConfigFuzz and readRemoteConfigFuzz are the calls the fuzz
// target makes (local wrappers, so that a change of their signatures is one
// line here).
func parseRemoteConfigFuzz(b []byte) (*RemoteConfig, error) { return ParseRemoteConfig(b) }

func readRemoteConfigFuzz(root string) (*RemoteConfig, error) { return ReadRemoteConfig(root) }

// sameRemoteConfig compares what a RemoteConfig decides (a nil and an empty
// trust list are the same).
func sameRemoteConfig(a, b *RemoteConfig) bool {
	return a.Remote == b.Remote && a.PlainHTTP == b.PlainHTTP && a.Credentials == b.Credentials &&
		slices.Equal(a.Trust, b.Trust) && a.Timeout == b.Timeout && a.AllowUnsigned == b.AllowUnsigned && a.timeout == b.timeout
}

// FuzzParseRemoteConfig checks the parser of a root's etc/kpreload/remote.yaml,
// which decides where a kernel hook pulls driver cells from and which keys
// they must be signed by: no panic; an error comes with no config; an
// accepted config names a registry remote.Parse takes, has trust keys unless
// allow_unsigned is set, names only absolute paths, bounds the pull by a
// timeout in (0, 1h], and round-trips (marshalled back to YAML, it parses to
// the same config); and ReadRemoteConfig, given the same bytes in a root,
// decides the same or names the file in its error.
func FuzzParseRemoteConfig(f *testing.F) {
	for _, s := range []string{
		"remote: oci://registry.example.com/gpu/kpreload-cells\ntrust: [/etc/kpreload/keys/builders.pub]\n",
		"remote: oci://registry.example.com/gpu/kpreload-cells\nplain_http: false\ncredentials: /etc/kpreload/registry.json\ntrust: [/etc/kpreload/keys/builders.pub]\ntimeout: 5m\n",
		"remote: oci://localhost:5000/cells\nplain_http: true\nallow_unsigned: true\ntimeout: 30s\n",
		"remote: oci://r.example/cells\ntrust:\n  - /etc/kpreload/keys/a.pub\n  - /etc/kpreload/keys/b.pub\n",
		"remote: oci://r.example/cells\n", "remote: https://r.example/cells\ntrust: [/k.pub]\n",
		"remote: oci://r.example/cells\ntrust: [keys/a.pub]\n", "remote: oci://r.example/cells\ntrust: [/k.pub]\ntimeout: 3h\n",
		"remote: oci://r.example/cells\ntrust: [/k.pub]\ntimeout: -1s\n", "remote: oci://r.example/cells\ntrust: [/k.pub]\nregistry: x\n",
		"remote: oci://r.example/cells\ntrust: [/../../etc/shadow]\ncredentials: /../../root/.docker/config.json\n",
		"remote: oci://r.example/cells\ntrust: []\nallow_unsigned: yes\n", "", "---\n", "remote: [\n",
		"a: &a [*a, *a, *a]\nremote: oci://r.example/c\ntrust: [/k]\n", "remote: oci://r.example/cells\ntrust: [/k.pub]\n---\nremote: x\n",
		"remote: oci://r.example/cells\ntrust: /k.pub\n", "remote: oci://r.example/cells\ntrust: [/k.pub]\ntimeout: 1h\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		c, err := parseRemoteConfigFuzz(text)
		root := fakeRoot(t, map[string]string{RemoteFile: string(text)})
		p := filepath.Join(root, RemoteFile)
		rc, rerr := readRemoteConfigFuzz(root)
		switch {
		case (err == nil) != (rerr == nil):
			t.Fatalf("ParseRemoteConfig(%q) = %v but ReadRemoteConfig = %v", text, err, rerr)
		case rerr != nil && !strings.Contains(rerr.Error(), p):
			t.Fatalf("ReadRemoteConfig(%q) = %v: the error does not name %s", text, rerr, p)
		case err != nil && (c != nil || rc != nil):
			t.Fatalf("ParseRemoteConfig(%q) = %+v with error %v, want no config", text, c, err)
		case err != nil:
			return
		case !sameRemoteConfig(c, rc):
			t.Fatalf("ReadRemoteConfig(%q) = %+v, ParseRemoteConfig = %+v", text, rc, c)
		}
		if _, err := remote.Parse(c.Remote); err != nil {
			t.Fatalf("ParseRemoteConfig(%q) accepted remote %q: %v", text, c.Remote, err)
		}
		if len(c.Trust) == 0 && !c.AllowUnsigned {
			t.Fatalf("ParseRemoteConfig(%q) accepted no trust keys without allow_unsigned", text)
		}
		for _, k := range append(slices.Clone(c.Trust), c.Credentials) {
			if k != "" && !filepath.IsAbs(k) {
				t.Fatalf("ParseRemoteConfig(%q) accepted the relative path %q", text, k)
			}
		}
		if c.timeout <= 0 || c.timeout > time.Hour {
			t.Fatalf("ParseRemoteConfig(%q) has timeout %v, want (0, 1h]", text, c.timeout)
		}
		back, err := yaml.Marshal(c)
		if err != nil {
			t.Fatalf("yaml.Marshal(%+v): %v", c, err)
		}
		again, err := parseRemoteConfigFuzz(back)
		if err != nil || !sameRemoteConfig(again, c) {
			t.Fatalf("ParseRemoteConfig(%q) (written back from %q) = %+v, %v; want %+v", back, text, again, err, c)
		}
		_ = os.Remove(p)
	})
}
