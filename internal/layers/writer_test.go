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
// A finished file handed to a function (a parameter) or kept on a value (a
// field or an element: the outputs of an earlier step) and renamed into place
// is an output some other code or program wrote: it goes through
// fileutil.Publish too (or fileutil.Move, for an entry moved out of the way
// and back).
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
			// handed holds the function's parameters (its function literals'
			// too): paths of files written elsewhere.
			handed := map[string]bool{}
			ast.Inspect(fn, func(n ast.Node) bool {
				var ft *ast.FuncType
				switch n := n.(type) {
				case *ast.FuncDecl:
					ft = n.Type
				case *ast.FuncLit:
					ft = n.Type
				default:
					return true
				}
				for _, f := range ft.Params.List {
					for _, name := range f.Names {
						handed[name.Name] = true
					}
				}
				return true
			})
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
						break
					}
					if len(call.Args) > 0 && outputPath(call.Args[0], handed) {
						t.Errorf("%s: %s renames %s, a finished output written elsewhere, into place itself: use fileutil.Publish (fileutil.Move for an entry moved out of the way), which syncs the directory", fset.Position(call.Pos()), fn.Name.Name, arg(0))
					}
				}
				return true
			})
		}
	}, "internal/fileutil", "internal/inroot")
}

// outputPath reports whether e names a file written elsewhere: a parameter
// (in handed), a field of a value or an element of a slice or map.
func outputPath(e ast.Expr, handed map[string]bool) bool {
	switch e := e.(type) {
	case *ast.ParenExpr:
		return outputPath(e.X, handed)
	case *ast.Ident:
		return handed[e.Name]
	case *ast.SelectorExpr, *ast.IndexExpr:
		return true
	}
	return false
}
