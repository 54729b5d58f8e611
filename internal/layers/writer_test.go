package layers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"strconv"
	"testing"
)

// TestOneWriter checks that no function outside internal/fileutil and
// internal/inroot writes a file (os.CreateTemp, os.WriteFile, os.Symlink) and
// renames it (os.Rename) itself: a temporary file renamed into place goes
// through fileutil (WriteAtomic, CreateTemp and Commit, WriteNew, Symlink,
// Publish) or, under an untrusted root, inroot, which sync the file and its
// directory. Trees renamed into place (os.MkdirTemp) are not files and may.
func TestOneWriter(t *testing.T) {
	fset := token.NewFileSet()
	productFiles(t, func(p, _ string) {
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parse %s: %v", p, err)
		}
		osName := ""
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); path == "os" {
				osName = "os"
				if imp.Name != nil {
					osName = imp.Name.Name
				}
			}
		}
		if osName == "" {
			return
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			// written maps the path expressions of the files written so far to
			// the call that wrote them; a temporary file renames whatever.
			written := map[string]string{}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); !ok || id.Name != osName {
					return true
				}
				switch arg := func(i int) string {
					if i < len(call.Args) {
						return types.ExprString(call.Args[i])
					}
					return ""
				}; sel.Sel.Name {
				case "CreateTemp":
					written["*"] = "os.CreateTemp"
				case "WriteFile":
					written[arg(0)] = "os.WriteFile"
				case "Symlink":
					written[arg(1)] = "os.Symlink"
				case "Rename":
					w, ok := written[arg(0)]
					if !ok {
						w, ok = written["*"]
					}
					if ok {
						t.Errorf("%s: %s writes a file with %s and renames it into place itself: use internal/fileutil (or internal/inroot under an untrusted root), which syncs the file and its directory", fset.Position(call.Pos()), fn.Name.Name, w)
					}
				}
				return true
			})
		}
	}, "internal/fileutil", "internal/inroot")
}
