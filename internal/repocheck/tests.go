package repocheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// TestRef is one test a document names: `package TestName` (or `TestName`
// after a named package, in the same row), on the line Line.
type TestRef struct {
	// Line is the 1-based line of the document.
	Line int
	// Package is the package's directory relative to the repository root.
	Package string
	// Name is the test or fuzz target's function name.
	Name string
}

// testSpan is a backticked test name, with or without its package.
var testSpan = regexp.MustCompile("^(?:([a-z0-9_./-]+) )?((?:Test|Fuzz)[A-Za-z0-9_]+)$")

// span is a backticked span of Markdown.
var span = regexp.MustCompile("`([^`]*)`")

// TableTests reads the tables of a document whose last column is headed
// "test" (docs/threat-model.md's): it returns every test named there and a problem for each row that says what a party "cannot" do
// and names no test, each backticked span of a last cell that is no test
// name, and each test name before any package in its row.
func TableTests(doc string) (refs []TestRef, probs []string) {
	inTable, header := false, true
	for i, line := range strings.Split(doc, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			inTable, header = false, true
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if header {
			inTable, header = len(cells) > 1 && strings.TrimSpace(cells[len(cells)-1]) == "test", false
			continue
		}
		if !inTable || strings.HasPrefix(line, "| ---") {
			continue
		}
		first := strings.Join(cells[:len(cells)-1], "|")
		pkg, named := "", 0
		for _, m := range span.FindAllStringSubmatch(cells[len(cells)-1], -1) {
			t := testSpan.FindStringSubmatch(m[1])
			switch {
			case t == nil:
				probs = append(probs, fmt.Sprintf("line %d: `%s` is not a test (`package TestName` or `TestName`)", i+1, m[1]))
				continue
			case t[1] != "":
				pkg = t[1]
			case pkg == "":
				probs = append(probs, fmt.Sprintf("line %d: `%s` comes before any package", i+1, m[1]))
				continue
			}
			refs = append(refs, TestRef{Line: i + 1, Package: pkg, Name: t[2]})
			named++
		}
		if named == 0 && strings.Contains(first, "cannot") {
			probs = append(probs, fmt.Sprintf("line %d: says what a party cannot do but names no test", i+1))
		}
	}
	return refs, probs
}

// MissingTests returns a problem for each ref whose package directory under
// root has no _test.go file declaring `func Name(`.
func MissingTests(root string, refs []TestRef) []string {
	var probs []string
	decls := map[string]string{} // package → its test files' text
	for _, r := range refs {
		text, ok := decls[r.Package]
		if !ok {
			files, _ := filepath.Glob(filepath.Join(root, r.Package, "*_test.go"))
			var b strings.Builder
			for _, f := range files {
				data, err := os.ReadFile(f)
				if err != nil {
					probs = append(probs, fmt.Sprintf("%s: %v", f, err))
					continue
				}
				b.Write(data)
				b.WriteByte('\n')
			}
			text = b.String()
			decls[r.Package] = text
		}
		if !regexp.MustCompile(`(?m)^func ` + r.Name + `\(`).MatchString(text) {
			probs = append(probs, fmt.Sprintf("line %d: %s %s: no such test (no func %s in %s/*_test.go)", r.Line, r.Package, r.Name, r.Name, r.Package))
		}
	}
	return probs
}
