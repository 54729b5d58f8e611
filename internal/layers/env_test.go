package layers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// envReaders are the functions that read the process's environment.
var envReaders = map[string][]string{
	"os":      {"Getenv", "LookupEnv", "Environ", "ExpandEnv"},
	"syscall": {"Getenv", "Environ"},
}

// TestEnvironmentReadInCmdOnly checks that only commands read environment
// variables: a package outside cmd/ takes what the environment says as an
// option or a parameter, so a test or another caller can set it without
// touching the process. Test files and testsupport/testenv
// (the tests' own helpers) may read it.
func TestEnvironmentReadInCmdOnly(t *testing.T) {
	fset := token.NewFileSet()
	productFiles(t, func(p, rel string) {
		if strings.HasPrefix(filepath.ToSlash(rel), "cmd/") {
			return
		}
		for _, call := range envCalls(t, fset, p) {
			t.Errorf("%s: %s reads the environment outside cmd/: take the value as an option filled in by the command", fset.Position(call.pos), call.name)
		}
	}, "testsupport/testenv")
}

// envCall is one call of an envReaders function.
type envCall struct {
	pos  token.Pos
	name string
}

// envCalls returns the calls of envReaders in the Go file p.
func envCalls(t *testing.T, fset *token.FileSet, p string) []envCall {
	t.Helper()
	f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parse %s: %v", p, err)
	}
	local := map[string]string{} // the name a file gives a package -> its path
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if _, ok := envReaders[path]; !ok {
			continue
		}
		name := path
		if imp.Name != nil {
			name = imp.Name.Name
		}
		local[name] = path
	}
	var out []envCall
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		id, ok := sel.X.(*ast.Ident)
		if !ok {
			return true
		}
		if path, ok := local[id.Name]; ok && slices.Contains(envReaders[path], sel.Sel.Name) {
			out = append(out, envCall{sel.Pos(), path + "." + sel.Sel.Name})
		}
		return true
	})
	return out
}
