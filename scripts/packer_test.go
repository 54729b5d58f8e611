package scripts_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackerReplaces runs scripts/packer.sh's replaces function, which copies
// a module's replace directives into the scratch module that builds it, on
// go.mod files of the shapes Packer's and its plugins' take: Packer 1.15.0's
// go-cty replace with its trailing comment (copied with the comment, it made
// `go mod edit` fail with "invalid new version"), block form, versions on
// either side, a comment that holds "=>" itself, and local directories (left out: not in the module proxy).
func TestPackerReplaces(t *testing.T) {
	src, err := os.ReadFile("packer.sh")
	if err != nil {
		t.Fatal(err)
	}
	_, fn, ok := strings.Cut(string(src), "\nreplaces() {\n")
	if !ok {
		t.Fatal("scripts/packer.sh has no replaces function")
	}
	fn, _, ok = strings.Cut(fn, "\n}\n")
	if !ok {
		t.Fatal("scripts/packer.sh: the replaces function does not end")
	}
	fn = "replaces() {\n" + fn + "\n}\n"
	for _, tc := range []struct {
		name, gomod, want string
	}{
		{
			name: "packer 1.15.0",
			gomod: "module github.com/hashicorp/packer\n\ngo 1.24.12\n\n" +
				"replace github.com/zclconf/go-cty => github.com/nywilken/go-cty v1.13.3 // added by packer-sdc fix as noted in github.com/hashicorp/packer-plugin-sdk/issues/187\n",
			want: "github.com/zclconf/go-cty github.com/nywilken/go-cty@v1.13.3\n",
		},
		{
			name:  "packer 1.9.4: no replace",
			gomod: "module github.com/hashicorp/packer\n\nrequire (\n\tgithub.com/zclconf/go-cty v1.13.0 // indirect\n)\n",
			want:  "",
		},
		{
			name: "block with versions, comments and a local directory",
			gomod: "module x\n\nreplace (\n\t// a comment line\n\ta/b v1.0.0 => c/d v1.2.0 // moved => here\n\te/f => ../g\n\th/i => /abs/j\n)\n" +
				"replace k/l=>m/n v0.1.0\n",
			want: "a/b@v1.0.0 c/d@v1.2.0\nk/l m/n@v0.1.0\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gomod := filepath.Join(t.TempDir(), "go.mod")
			if err := os.WriteFile(gomod, []byte(tc.gomod), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command("bash", "-euo", "pipefail", "-c", fn+`replaces "$1"`, "bash", gomod).CombinedOutput()
			if err != nil {
				t.Fatalf("replaces: %v\n%s", err, out)
			}
			if got := string(out); got != tc.want {
				t.Errorf("replaces = %q, want %q", got, tc.want)
			}
		})
	}
}
