package layers

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxCmdFuncLines is the most lines a function under cmd/ may take.
const maxCmdFuncLines = 80

// TestCmdFunctionsShort checks that no function in the commands (cmd/,
// test files aside) is longer than maxCmdFuncLines: a command
// builds its flags, validates them and runs, and what is not about flags
// lives in a library.
//
// A function's length is the lines from its "func" keyword to its closing
// brace, all it encloses included: a function literal (a cobra RunE, a
// callback) counts toward the function it is written in, and so do the flag
// table (the f.StringVar(...) calls) and the help text written inside it. A
// function literal at package level (var x = func...) counts on its own.
// Package-level tables (constants, variables) are no function's: a help
// text too long for its constructor may live in a constant.
func TestCmdFunctionsShort(t *testing.T) {
	fset := token.NewFileSet()
	productFiles(t, func(p, rel string) {
		if !slices.Contains(strings.Split(filepath.ToSlash(rel), "/"), "cmd") {
			return
		}
		pkg := filepath.ToSlash(filepath.Dir(rel))
		for _, fn := range funcLengths(t, fset, p) {
			if fn.lines > maxCmdFuncLines {
				t.Errorf("%s: %s.%s is %d lines, over %d: split it into build (flags), validate and run, and move what is not about flags into a library",
					fset.Position(fn.pos), pkg, fn.name, fn.lines, maxCmdFuncLines)
			}
		}
	})
}

// funcLength is one function's name, position and length in lines.
type funcLength struct {
	name  string
	pos   token.Pos
	lines int
}

// funcLengths returns the lengths of the functions declared in the Go file
// p, and of the function literals at its package level.
func funcLengths(t *testing.T, fset *token.FileSet, p string) []funcLength {
	t.Helper()
	f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parse %s: %v", p, err)
	}
	span := func(n ast.Node) int { return fset.Position(n.End()).Line - fset.Position(n.Pos()).Line + 1 }
	var out []funcLength
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			name := d.Name.Name
			if d.Recv != nil && len(d.Recv.List) == 1 {
				name = recvType(d.Recv.List[0].Type) + "." + name
			}
			out = append(out, funcLength{name, d.Pos(), span(d)})
		case *ast.GenDecl:
			ast.Inspect(d, func(n ast.Node) bool {
				lit, ok := n.(*ast.FuncLit)
				if !ok {
					return true
				}
				pos := fset.Position(lit.Pos())
				out = append(out, funcLength{fmt.Sprintf("func@%s:%d", filepath.Base(pos.Filename), pos.Line), lit.Pos(), span(lit)})
				return false
			})
		}
	}
	return out
}

// recvType is the name of a method's receiver type, without its pointer
// or type parameters.
func recvType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvType(e.X)
	case *ast.IndexExpr:
		return recvType(e.X)
	case *ast.IndexListExpr:
		return recvType(e.X)
	case *ast.Ident:
		return e.Name
	}
	return "?"
}
