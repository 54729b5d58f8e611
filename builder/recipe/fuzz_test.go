package recipe

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// FuzzParse checks the strict recipe decoder: no panic; errors come without a
// recipe, each problem an *Error naming the file and, for a document with any
// content, a line; Validate never panics on what Parse accepts; an accepted
// recipe written back as YAML parses to a recipe that writes the same YAML.
// Seeds: every recipe in recipes/ and hand-made broken ones.
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob(filepath.Join(recipesDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no recipes in %s (%v)", recipesDir, err)
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		"", "---\n", "~\n", "- a\n", "name: [\n", "name: x\nnmae: y\n", "name: x\nname: y\n",
		"kernels:\n  select:\n    - series: 6.1\n      newest: many\n", "driver:\n\tname: x\n",
		"name: a\n---\nname: b\n", "signing:\n  key: k\n", "modules: nvidia\n", "kernels: &a\n  releases: *a\n",
		"patches: [\"../x.patch\"]\nsource:\n  dir: /abs\n",
	} {
		f.Add([]byte(s))
	}
	file := filepath.Join(f.TempDir(), "fuzz.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Parse(file, data)
		if err != nil {
			if r != nil {
				t.Fatalf("Parse returned both %+v and error %v", r, err)
			}
			var errs []error
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				errs = j.Unwrap()
			} else {
				errs = []error{err}
			}
			for _, e := range errs {
				var re *Error
				if !errors.As(e, &re) || re.File != file {
					t.Fatalf("error %q (%T) is not an *Error naming the file", e, e)
				}
				if re.Line <= 0 && strings.TrimSpace(string(data)) != "" && !strings.HasPrefix(re.Msg, "the file is empty") {
					t.Fatalf("error %q names no line", e)
				}
			}
			return
		}
		if r == nil || r.File != file {
			t.Fatalf("Parse accepted %+v", r)
		}
		_ = r.Validate()
		out, err := yaml.Marshal(r)
		if err != nil {
			t.Fatalf("yaml.Marshal(%+v): %v", r, err)
		}
		again, err := Parse(file, out)
		if err != nil {
			t.Fatalf("re-parse of\n%s\n: %v", out, err)
		}
		out2, err := yaml.Marshal(again)
		if err != nil || string(out2) != string(out) {
			t.Fatalf("round trip changed the recipe:\n%s\n%s (%v)", out, out2, err)
		}
	})
}
