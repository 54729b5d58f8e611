package cli

import (
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/testsupport/treetest"
)

// TestRecipesRelativeOrAbsolute: --recipes recipes (relative, as from a
// checkout), --recipes /abs/recipes and no --recipes at all (the default,
// recipes/ of the working directory) accept the same archives.yaml keys and
// refuse the same links, for the commands that load recipes.
func TestRecipesRelativeOrAbsolute(t *testing.T) {
	const pub = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmDMEZ\n-----END PGP PUBLIC KEY BLOCK-----\n"
	// Each case makes recipes/keys/team.asc (or what stands there) in top.
	tests := []struct {
		name  string
		files map[string]string // relative to top
		links map[string]string // relative to top: the link's target
		want  string            // in the error; "" accepts the key
	}{
		{"a key file", map[string]string{"recipes/keys/team.asc": pub}, nil, ""},
		{"a link inside", map[string]string{"recipes/keys/2026.asc": pub}, map[string]string{"recipes/keys/team.asc": "2026.asc"}, ""},
		{"a link out and back in", map[string]string{"recipes/keys/2026.asc": pub}, map[string]string{"recipes/keys/team.asc": "../../recipes/keys/2026.asc"}, ""},
		{"a link out", map[string]string{"outside/team.asc": pub}, map[string]string{"recipes/keys/team.asc": "../../outside/team.asc"}, "keys/team.asc is a link to {top}/outside/team.asc, outside the recipes directory"},
		{"an absolute link out", nil, map[string]string{"recipes/keys/team.asc": "/etc/passwd"}, "keys/team.asc is a link to /etc/passwd, outside the recipes directory"},
		{"a directory link out", map[string]string{"outside/team.asc": pub}, map[string]string{"recipes/keys": "../outside"}, "keys/team.asc is a link to {top}/outside/team.asc, outside the recipes directory"},
	}
	for _, tc := range tests {
		for _, spelled := range []string{"relative", "absolute", "default"} {
			t.Run(tc.name+" "+spelled, func(t *testing.T) {
				top, err := filepath.EvalSymlinks(t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				files := map[string]string{
					"recipes/archives.yaml": "archives:\n  - name: team\n    url: https://apt.example.com/debian\n    suites: [stable]\n    components: [main]\n    key: keys/team.asc\n",
					"recipes/team-555.yaml": "name: team-555\ndriver:\n  name: team\nflavor: proprietary\nsource:\n  package: team-kernel-dkms\n  path: usr/src/team-{version}\n  select: {branch: \"555\", suites: [team]}\nmodules: [team]\nkernels:\n  releases: [6.1.0-56-cloud-amd64]\n",
				}
				maps.Copy(files, tc.files)
				treetest.Write(t, top, files)
				treetest.Links(t, top, tc.links)
				t.Chdir(top)
				var flag []string
				switch spelled {
				case "relative":
					flag = []string{"--recipes", "recipes"}
				case "absolute":
					flag = []string{"--recipes", filepath.Join(top, "recipes")}
				}
				want := strings.ReplaceAll(tc.want, "{top}", top)
				cache := t.TempDir()
				runs := [][]string{append([]string{"recipe", "supported-gpus", "--cache", cache}, flag...)}
				if want != "" {
					// build refuses before it fetches anything.
					runs = append(runs, append([]string{"build", "team-555", "--cache", cache}, flag...))
				}
				for _, args := range runs {
					code, _, stderr := runCLI(args...)
					t.Logf("kpreload %s: exit %d: %s", strings.Join(args, " "), code, stderr)
					got := "accepted"
					if strings.Contains(stderr, "archives[0].key") {
						got = "refused"
					}
					switch {
					case want == "" && (got != "accepted" || !strings.Contains(stderr, "none of the 1 recipes names a supported-gpus list")):
						t.Errorf("kpreload %s: exit %d, stderr %q; want the key accepted", strings.Join(args, " "), code, stderr)
					case want != "" && (code == 0 || got != "refused" || !strings.Contains(stderr, want)):
						t.Errorf("kpreload %s: exit %d, stderr %q; want the key refused: %q", strings.Join(args, " "), code, stderr, want)
					}
				}
			})
		}
	}
}
