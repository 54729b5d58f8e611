package layers

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"strconv"
	"strings"
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
// and back), and so is a local variable holding such a path or the path
// another package's function returned (formats.Write's output, say).
func TestOneWriter(t *testing.T) {
	fset := token.NewFileSet()
	productFiles(t, func(p, _ string) {
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parse %s: %v", p, err)
		}
		for _, problem := range writerProblems(fset, f) {
			t.Error(problem)
		}
	}, "internal/fileutil", "internal/inroot")
}

// writerProblems returns what TestOneWriter refuses in f, one line each.
func writerProblems(fset *token.FileSet, f *ast.File) []string {
	var problems []string
	osName := ""
	// makers are the imported packages whose functions return paths of
	// files they wrote; os, path/filepath and the string packages only
	// make names (or temporary trees).
	makers := map[string]bool{}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		name := path[strings.LastIndex(path, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		switch path {
		case "os":
			osName = name
		case "path", "path/filepath", "fmt", "strings":
		default:
			makers[name] = true
		}
	}
	if osName == "" {
		return nil
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
			if as, ok := n.(*ast.AssignStmt); ok {
				handOn(as, handed, makers)
				return true
			}
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
					problems = append(problems, fmt.Sprintf("%s: %s writes a file with %s and renames it into place itself: use internal/fileutil (or internal/inroot under an untrusted root), which syncs the file and its directory", fset.Position(call.Pos()), fn.Name.Name, w))
					break
				}
				if len(call.Args) > 0 && outputPath(call.Args[0], handed) {
					problems = append(problems, fmt.Sprintf("%s: %s renames %s, a finished output written elsewhere, into place itself: use fileutil.Publish (fileutil.Move for an entry moved out of the way), which syncs the directory", fset.Position(call.Pos()), fn.Name.Name, arg(0)))
				}
			}
			return true
		})
	}
	return problems
}

// handOn marks the variables as assigns in handed when they take a path
// written elsewhere: an output path (outputPath) or, from a call into one of
// makers (another package's function), its first result.
func handOn(as *ast.AssignStmt, handed, makers map[string]bool) {
	for i, lhs := range as.Lhs {
		id, ok := lhs.(*ast.Ident)
		if !ok || id.Name == "_" {
			continue
		}
		var rhs ast.Expr
		switch {
		case len(as.Rhs) == len(as.Lhs):
			rhs = as.Rhs[i]
		case i == 0 && len(as.Rhs) == 1:
			rhs = as.Rhs[0]
		default:
			continue
		}
		if outputPath(rhs, handed) || madeElsewhere(rhs, makers) {
			handed[id.Name] = true
		}
	}
}

// madeElsewhere reports whether e calls a function of one of makers.
func madeElsewhere(e ast.Expr, makers map[string]bool) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && makers[pkg.Name]
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

// TestWriterProblems runs TestOneWriter's check on small sources: each way of
// renaming a file written here or elsewhere into place is refused, the ways
// through fileutil and trees made here are not.
func TestWriterProblems(t *testing.T) {
	for _, tt := range []struct {
		name, body string
		want       string // in the one problem; "" for none
	}{
		{"temporary file written here", `f, _ := os.CreateTemp(dir, "x"); f.Close(); os.Rename(f.Name(), dst)`, "writes a file with os.CreateTemp"},
		{"file written here", `os.WriteFile(tmp, nil, 0o644); os.Rename(tmp, dst)`, "writes a file with os.WriteFile"},
		{"parameter", `os.Rename(out, dst)`, "renames out, a finished output"},
		{"field", `os.Rename(j.raw, dst)`, "renames j.raw, a finished output"},
		{"element", `os.Rename(j.outputs[0], dst)`, "renames j.outputs[0], a finished output"},
		{"local holding a field", `src := j.outputs[0]; os.Rename(src, dst)`, "renames src, a finished output"},
		{"local holding a parameter", `var src string; src = out; os.Rename(src, dst)`, "renames src, a finished output"},
		{"another package's output", `p, _, _ := formats.Write(out); os.Rename(p, dst)`, "renames p, a finished output"},
		{"through fileutil", `p, _, _ := formats.Write(out); fileutil.Publish(p, dst); fileutil.Move(j.raw, dst)`, ""},
		{"tree made here", `tmp, _ := os.MkdirTemp(dir, "x"); os.WriteFile(filepath.Join(tmp, "f"), nil, 0o644); os.Rename(tmp, dst)`, ""},
		{"name made here", `tmp := filepath.Join(dir, "tree"); os.Rename(tmp, dst)`, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			src := "package p\n\nimport (\n\t\"os\"\n\t\"path/filepath\"\n\n\t\"example.org/formats\"\n\t\"example.org/fileutil\"\n)\n\n" +
				"var _ = filepath.Join\nvar _ = formats.Write\nvar _ = fileutil.Move\n\n" +
				"func f(j *job, dir, out, dst string) {\n\t" + tt.body + "\n}\n"
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "p.go", src, parser.SkipObjectResolution)
			if err != nil {
				t.Fatalf("parse:\n%s\n%v", src, err)
			}
			got := writerProblems(fset, f)
			switch {
			case tt.want == "" && len(got) != 0:
				t.Errorf("problems = %q, want none", got)
			case tt.want != "" && (len(got) != 1 || !strings.Contains(got[0], tt.want)):
				t.Errorf("problems = %q, want one saying %q", got, tt.want)
			}
		})
	}
}
